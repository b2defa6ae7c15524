"""A step whose config holds a jax PartitionSpec, a timedelta and a Path, run and planned again
(tests/executor/test_encodings.py): argv is PREFIX run|plan."""

import dataclasses, datetime, pathlib, sys
from jax.sharding import PartitionSpec as P
import executor
from executor import ExecutorStep, this_output_path


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    axis: object
    every: datetime.timedelta
    data: pathlib.Path
    output_path: object


def train(config):
    pathlib.Path(config.output_path, "seen.txt").write_text(f"{config.axis} {config.every} {config.data}")
    return {"ok": 1}


step = ExecutorStep("train/sharded", train, TrainConfig(P("data", None), datetime.timedelta(minutes=5),
                                                        pathlib.Path("corpus/a.txt"), this_output_path()))
if sys.argv[2] == "run":
    path = executor.materialize(step, prefix=sys.argv[1], runner="inline")
    print(pathlib.Path(path, "seen.txt").read_text())
else:
    print(executor.plan([step], prefix=sys.argv[1]).steps[0].decision)
