"""Tests of the reproducibility and inspection tools (issue 7)."""
