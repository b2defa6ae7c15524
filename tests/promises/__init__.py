"""Tests that hold the project's headline promises, each written so the named break fails it."""
