"""An experiment that declares, at import time, a step with an absolute override_output_path.

Marin accepts absolute overrides; stepgraph refuses them, and must do so as a usage error
(exit 2, one line) from executor_main, not as a traceback while the file is imported.
"""
from dataclasses import dataclass

from executor import ExecutorStep, executor_main, this_output_path


@dataclass(frozen=True)
class Config:
    output_path: str


def write(config: Config) -> None:
    pass


step = ExecutorStep("checkpoints/run", write, Config(this_output_path()),
                    override_output_path="/tmp/elsewhere/checkpoints/run")

if __name__ == "__main__":
    executor_main(steps=[step])
