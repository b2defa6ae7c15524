"""Runners: the seam between the executor loop and where step functions execute.

`submit(call) -> handle`; the executor polls handles with `wait`. The Ray runner is the default;
the inline runner runs each call in a child process of the executor, for unit tests and debugging.
"""

from executor.engine.runner.base import Runner, StepCall, StepHandle, StepOutcome

__all__ = ["Runner", "StepCall", "StepHandle", "StepOutcome"]
