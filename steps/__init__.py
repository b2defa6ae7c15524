"""The step library: each step is a frozen config dataclass plus a plain function of it."""
