"""Runners: the seam between the executor loop and where step functions execute.

`submit(call) -> handle`; the executor polls handles with `wait`. The inline runner runs each call
in a child process of the executor; the Ray runner, as a Ray task; the auto runner (the default)
runs a call inline unless it needs Ray, and starts Ray then (auto.py).
"""

from executor.engine.runner.base import Runner, StepCall, StepHandle, StepOutcome

__all__ = ["Runner", "StepCall", "StepHandle", "StepOutcome"]
