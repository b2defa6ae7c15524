"""The storage options' route from the command line to the step: the prefix and its storage options are
resolved once (executor.engine.prefix.prefixes.open_given: the JSON read once, the prefix chosen once,
one Storage made), the prefix opened once, and that one value goes down: executor.cli -> executor.api ->
the run loop -> the runner -> the step, whose `current_storage()` is the very Storage the command line
made. Counted in a real run, on a memory:// prefix (steps on threads of this process: the identity is
checked) and on the S3 emulator (steps in child processes: the options reach them, the step writes there)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from executor import ExecutorStep, cli, open_file, this_output_path
from executor.core.locations import Storage
from executor.engine.prefix import location, prefixes
from tests.emulators import s3_emulator  # noqa: F401  (the session's moto S3)

SEEN: list = []  # the Storage each step found current, in this process (memory:// steps run on threads)


@dataclass(frozen=True)
class WriteConfig:
    text: str
    output_path: str


def write_text(config: WriteConfig) -> dict:
    SEEN.append(location.current_storage())
    with open_file(f"{config.output_path}/out.txt", "w") as f:
        f.write(config.text)
    return {}


def two_steps(label: str) -> list[ExecutorStep]:
    first = ExecutorStep(f"route-{label}/first", write_text, WriteConfig("one", this_output_path()))
    second = ExecutorStep(f"route-{label}/second", write_text, WriteConfig("two", this_output_path()))
    return [first, second]


class Resolutions:
    """Counts, in this test, each part of resolving a run's prefix and storage options: the flag's JSON
    read, the prefix chosen, a non-empty Storage made, a store connected, and the OpenedPrefix the
    command line got (kept, to compare with what the step sees)."""

    def __init__(self, monkeypatch):
        self.json_read, self.resolved, self.storages, self.connects, self.opened = 0, 0, 0, [], []
        read, resolve, connect, given = (location.storage_json, prefixes.resolve_prefix, location._connect,
                                         cli.open_given)
        init = Storage.__init__

        def counting_read(*args, **kwargs):
            self.json_read += 1
            return read(*args, **kwargs)

        def counting_resolve(*args, **kwargs):
            self.resolved += 1
            return resolve(*args, **kwargs)

        def counting_init(storage, by_location=None, **kwargs):
            self.storages += bool(by_location)
            init(storage, by_location, **kwargs)

        def counting_connect(prefix, options):
            self.connects.append(prefix)
            return connect(prefix, options)

        def kept(*args, **kwargs):
            self.opened.append(given(*args, **kwargs))
            return self.opened[-1]

        monkeypatch.setattr(location, "storage_json", counting_read)
        monkeypatch.setattr(prefixes, "resolve_prefix", counting_resolve)
        monkeypatch.setattr(Storage, "__init__", counting_init)
        monkeypatch.setattr(location, "_connect", counting_connect)
        monkeypatch.setattr(cli, "open_given", kept)

    def once(self, prefix: str) -> None:
        assert (self.json_read, self.resolved, self.storages, len(self.opened)) == (1, 1, 1, 1), vars(self)
        assert self.connects == [prefix], self.connects


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_a_run_resolves_its_prefix_and_storage_options_once_and_the_step_gets_that_storage(monkeypatch, dry_run):
    SEEN.clear()
    prefix = f"memory://route-{'dry' if dry_run else 'run'}"
    options = {"s3://corpus": {"endpoint_url": "http://127.0.0.1:9"}}  # carried, never used: nothing reads there
    resolutions = Resolutions(monkeypatch)
    argv = ["--prefix", prefix, "--storage-options", json.dumps(options), *(["--dry-run"] if dry_run else [])]
    assert cli.run(two_steps("memory"), argv=argv, environ={}, main_file=__file__) == 0
    resolutions.once(prefix)
    [opened] = resolutions.opened
    assert opened.storage.keys == ("s3://corpus",)
    assert len(SEEN) == (0 if dry_run else 2) and all(seen is opened.storage for seen in SEEN), SEEN


def test_a_run_on_a_bucket_opens_it_once_and_its_steps_write_there_with_the_options(s3_emulator, monkeypatch):
    prefix = s3_emulator.fresh_prefix("route")
    resolutions = Resolutions(monkeypatch)
    argv = ["--prefix", prefix, "--storage-options", json.dumps(s3_emulator.storage_options), "--runner", "inline"]
    assert cli.run(two_steps("s3"), argv=argv, environ={}, main_file=__file__) == 0
    resolutions.once(prefix)
    [opened] = resolutions.opened
    written = sorted(p.rsplit("/", 2)[-2] for p in opened.filesystem.glob(f"{prefix}/route-s3/*/out.txt"))
    assert [w.split("-")[0] for w in written] == ["first", "second"], written


def test_an_opened_prefix_given_to_the_api_is_used_as_it_is_by_every_call(monkeypatch):
    """docs/python-api.md: `Options(prefix=<an OpenedPrefix>)` is neither resolved nor opened again, so
    a plan, a run and a result read share one open; storage options beside it are refused."""
    import executor
    from executor.core.errors import ExecutorError
    from executor.engine.prefix.prefixes import open_prefix

    opened = open_prefix("memory://route-api")
    resolutions = Resolutions(monkeypatch)
    steps = two_steps("api")
    assert executor.run(steps, prefix=opened, environ={}).ok
    assert {s.decision for s in executor.plan(steps, prefix=opened, environ={}).steps} == {"skip"}
    assert executor.load_result(steps[0], prefix=opened, environ={}) == {}
    assert (resolutions.resolved, resolutions.connects, resolutions.json_read) == (0, [], 0)
    with pytest.raises(ExecutorError, match="an opened prefix holds its storage options"):
        executor.plan(steps, prefix=opened, storage_options={"token": "anon"}, environ={})
