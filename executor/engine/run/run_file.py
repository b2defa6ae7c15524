"""The run file `<prefix>/runs/<experiment>-<run id>.json`: what one invocation that ran steps did.

Written before the first step starts (the prefix, the plan, where every output is) and again when
the run finishes (each step's final outcome, errors, the timeline, and under `mirrors` each mirrored
input the run needed: copied here from which source, how many bytes and files in how long, already
complete, copied by another runner, or failed), or with `forced_exit` when a
second signal ends the process early. A subscriber of the run's events: it records the timeline
and writes the file at RunFinished, before the subscribers after it (the command line's run report
reads the file) see that event.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from executor.core.plan import Plan
from executor.core.record import RUN_SCHEMA, RunRecordRef, to_json_bytes
from executor.engine.prefix import outputs
from executor.engine.events import Event, Events, MirrorCopied, RunFinished
from executor.engine.run.timeline import TimelineRecorder


def step_entry(report: Any) -> dict[str, Any]:
    """One StepReport as the run file's `steps` list holds it."""
    status = report.status.value if report.status is not None else None
    entry = {"name": report.name, "step_id": report.step_id, "output_path": report.output_path,
             "decision": report.decision, "reason": report.reason, "status": status,
             "error": report.error, "ran_here": report.ran_here}
    if report.cut_off:  # committed as an early cutoff: why (only then, so other entries stay as they were)
        entry["cut_off"] = report.cut_off
    return entry


def mirror_entry(event: MirrorCopied) -> dict[str, Any]:
    """One mirrored input as the run file's `mirrors` list holds it."""
    return {"logical": event.logical, "path": event.path, "how": event.how, "source": event.source,
            "bytes": event.bytes, "files": event.files, "seconds": event.seconds, "error": event.error}


class RunFile:
    def __init__(self, fs: Any, path: str, header: dict[str, Any], events: Events):
        self.fs, self.path, self.events = fs, path, events
        self.data = dict(header)
        self.timeline = TimelineRecorder()
        # A forced exit (a second signal) writes from another thread, maybe while the final version is
        # being written: it reads the data under this lock, and stands aside only once that write is done.
        self._lock = threading.Lock()
        self._final_written = False

    @classmethod
    def begin(cls, planned: Any, run_id: str, experiment: str, description: str | None, main_file: str | None,
              invocation: dict[str, Any], events: Events) -> "RunFile":
        """The run file as the run starts, written (a failure to write it stops the run before any step)."""
        plan: Plan = planned.plan
        header = {"schema": RUN_SCHEMA, "run_id": run_id, "experiment": experiment, "description": description,
                  "experiment_file": main_file, "started_at": time.time(), "invocation": invocation,
                  "prefix": planned.prefix,
                  "plan": [{"name": d.node.name, "step_id": d.node.step_id, "action": d.action.value,
                            "reason": d.reason} for d in plan.decisions.values()],
                  "steps": [step_entry(s) for s in planned.steps],  # where everything is; status at the end
                  "graph": {d.node.step_id: [plan.decisions[x].node.step_id for x in d.node.deps
                                             if x in plan.decisions] for d in plan.decisions.values()}}
        run_file = cls(planned.fs, outputs.join(planned.prefix, RunRecordRef(experiment, run_id).key), header, events)
        run_file._write()
        return run_file

    def __call__(self, event: Event) -> None:
        self.timeline(event)
        if isinstance(event, MirrorCopied):  # each mirrored input the run needed: how it came to be complete here
            with self._lock:
                self.data.setdefault("mirrors", []).append(mirror_entry(event))
        elif isinstance(event, RunFinished) and event.result is not None:
            self.finish(event.result)

    def finish(self, result: Any) -> None:
        """The final run file, from the run's result; a failure to write it is a warning (the steps'
        statuses are final already)."""
        final = dict(finished_at=time.time(), exit_code=int(result.exit_code),
                     ran_here=[s.step_id for s in result.steps if s.ran_here],
                     outcome={s.step_id: s.status.value for s in result.steps},
                     errors={s.step_id: s.error for s in result.steps if s.error},
                     timeline=self.timeline.events(), steps=[step_entry(s) for s in result.steps])
        with self._lock:
            if result.runner_error:
                self.data["runner_error"] = result.runner_error
            self.data.update(final)
        try:
            self._write()
            self._final_written = True
        except Exception as e:  # noqa: BLE001 - the run's result stands; say the record is missing
            self.events.warning(f"could not write the run record {self.path}: {type(e).__name__}: {e}")

    def forced(self, exit_code: int) -> None:
        """A second signal ends the process now: the run file says so, unless its final version is
        written already (one being written now may never finish: the process exits after this)."""
        if self._final_written:
            return
        with self._lock:
            data = {**self.data, "finished_at": time.time(), "exit_code": exit_code, "forced_exit": True}
        outputs.write_json(self.fs, self.path, to_json_bytes(data))

    def _write(self) -> None:
        with self._lock:
            data = to_json_bytes(self.data)
        outputs.write_json(self.fs, self.path, data)
