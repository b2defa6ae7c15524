"""Tests of executor/engine/store: one contract suite for every backend, plus retry and fault injection."""
