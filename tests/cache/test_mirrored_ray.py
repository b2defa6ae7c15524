"""A mirrored input on the Ray runner (issue 30.3), on the session's Ray head that tests/conftest.py's
ray_local joins: the mirror copy runs as a Ray task on a worker (its attempt log, which only the Ray runner
writes, sits beside the copy's status), the step reads the checked copy, and a second run copies nothing."""

from __future__ import annotations

import json

import executor
from executor.engine.events import LogLine, MirrorCopied
from tests.cache.mirror_graph import CORPUS, build, write_corpus
from tests.cache.test_mirrored import MIRROR


def test_on_the_ray_runner_the_copy_is_a_task_and_the_step_reads_it(tmp_path, ray_local):
    source, prefix, events = tmp_path / "eu", tmp_path / "p", []
    write_corpus(source)
    result = executor.run(build(), prefix=str(prefix), runner="ray", mirror_sources=(str(source),), environ={},
                          subscribers=[events.append])
    assert result.ok, result.steps
    [copied] = [e for e in events if isinstance(e, MirrorCopied)]
    assert (copied.how, copied.source, copied.files) == ("copied", f"{source}/raw/corpus", 2)
    coordination = prefix / "mirror/.executor/corpus-bucket/raw/corpus"
    assert (coordination / ".executor/logs/attempt-1.log").exists()  # a Ray task made the copy
    assert json.loads((coordination / "record.json").read_text())["source"] == f"{source}/raw/corpus"
    [record] = prefix.glob("mirrored/count-*/.executor/record.json")
    assert json.loads(record.read_text())["result"] == {"lines": 3000, "read_from": str(prefix / MIRROR)}
    events.clear()
    again = executor.run(build(), prefix=str(prefix), runner="ray", mirror_sources=(str(source),), environ={},
                         subscribers=[events.append], force_run="mirrored/count")
    assert again.ok and not [e for e in events if isinstance(e, LogLine) and e.text.startswith("mirror ")]
