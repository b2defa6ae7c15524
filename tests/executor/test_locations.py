"""A location is a value (issue 29): one scheme parser for the whole code base, storage options
keyed by location (longest match wins), clear errors for malformed maps, and no process-wide
options: two runs in one process, on two threads, each see only their own."""

from __future__ import annotations

import ast
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

import executor
from executor.core.errors import ExecutorError
from executor.core.locations import Location, Storage, storage_from
from executor.core.urls import canonical, protocol_of
from executor.engine.prefix import location, outputs
from executor.engine.runner.capture import captured_output
from executor.engine.store import open_store
from executor.engine.store.local import LocalStore
from executor.engine.store.memory import MemoryStore
from tests.emulators import s3_emulator  # noqa: F401  (session fixture)

REPO = Path(__file__).resolve().parents[2]


# -- one parser ------------------------------------------------------------------------------------

@pytest.mark.parametrize("url, protocol, local", [
    ("/data/x", "file", True), ("relative/x", "file", True), ("file:///data/x", "file", True),
    ("memory://x", "memory", False), ("gs://b/k", "gs", False), ("gcs://b/k", "gs", False),
    ("GS://b/k", "gs", False), ("s3://b/k", "s3", False), ("s3a://b/k", "s3", False),
    ("https://host/f", "https", False),
])
def test_one_parser_answers_the_same_for_aliases_everywhere(url, protocol, local, tmp_path):
    assert protocol_of(url) == protocol
    assert outputs.is_local(url) is local == Location(url).is_local
    by_scheme = Storage({f"{p}://": {"for": p} for p in ("gs", "s3", "https")})
    assert by_scheme.options_for(url) == ({} if protocol in ("file", "memory") else {"for": protocol})
    if protocol in ("gs", "s3"):  # the prefix a run uses, and the store it opens, name the one scheme
        assert outputs.normalize_prefix(url + "/") == f"{protocol}://b/k"
        assert location.bare_path(url + "/") == "b/k"


def test_file_urls_and_plain_paths_open_the_same_local_store_and_log(tmp_path):
    assert canonical(f"file://{tmp_path}") == str(tmp_path)
    for prefix in (str(tmp_path / "p"), f"file://{tmp_path}/p"):
        store = open_store(prefix)
        assert isinstance(store, LocalStore) and store.root == str(tmp_path / "p")
        assert outputs.normalize_prefix(prefix) == str(tmp_path / "p")
    assert isinstance(open_store("memory://p"), MemoryStore)
    with captured_output(f"file://{tmp_path}/logs/a.log"):  # a file:// log is written in place
        os.write(1, b"to the log\n")  # fd 1, as a step's output reaches it
    assert "to the log" in (tmp_path / "logs" / "a.log").read_text()


def test_a_log_on_a_url_is_uploaded_whole_when_the_block_ends_and_its_temporary_file_removed():
    import glob
    import tempfile

    from executor.engine.prefix.location import open_file

    before = set(glob.glob(f"{tempfile.gettempdir()}/stepgraph-log-*"))
    url = "memory://logs-test/attempt-1.log"
    with captured_output(url, header="s/x attempt 1"):
        os.write(1, b"out " * 300_000 + b"\n")  # over a megabyte: streamed in chunks
        os.write(2, b"to stderr\n")
    with open_file(url, "rb") as f:
        text = f.read().decode()
    assert text.startswith("=== ") and "s/x attempt 1" in text.splitlines()[0]
    assert text.count("out ") == 300_000 and "to stderr" in text
    assert set(glob.glob(f"{tempfile.gettempdir()}/stepgraph-log-*")) == before


def test_s3a_is_one_answer_everywhere(s3_emulator):
    """Before: protocol_of and S3Store took s3a://, the store opener refused it."""
    from executor.engine.store.s3 import S3Store

    prefix = s3_emulator.fresh_prefix("alias").replace("s3://", "s3a://")
    store = location.open_store(prefix, {"s3://": s3_emulator.storage_options})
    assert isinstance(store.inner, S3Store) and store.root == canonical(prefix)
    assert store.create_if_absent("k", b"v") is not None
    fs, path = location.url_to_fs(prefix + "/k", Storage({"s3a://": s3_emulator.storage_options}))
    assert fs.cat_file(path) == b"v"


SCHEME_TEXT = re.compile(r"""["'](gs|gcs|s3|s3a|file|memory)://["']|["']://["']""")


def test_no_module_but_the_parser_takes_a_url_apart():
    """The one parser (executor/core/urls.py) is the only code that splits on `://` or compares a
    scheme; everything else in executor/ and steps/ asks it."""
    found = []
    for path in sorted([*(REPO / "executor").rglob("*.py"), *(REPO / "steps").rglob("*.py")]):
        if path == REPO / "executor" / "core" / "urls.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in (
                    "split", "partition", "rpartition", "startswith", "removeprefix"):
                text = ast.unparse(node)
                ray_address = ast.unparse(node.func.value).startswith("address")  # ray://host:port, not storage
                if SCHEME_TEXT.search(text) and not ray_address:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: {text}")
    assert not found, "scheme parsed outside executor/core/urls.py:\n" + "\n".join(found)


# -- options keyed by location --------------------------------------------------------------------

def test_the_longest_matching_key_wins_for_any_url():
    storage = Storage({"s3://corpus": {"endpoint_url": "http://corpus"}, "s3://runs/team": {"endpoint_url": "http://team"},
                       "s3://": {"endpoint_url": "http://aws"}, "gcs://": {"token": "anon"}})
    assert storage.options_for("s3://corpus/in/a.txt") == {"endpoint_url": "http://corpus"}
    assert storage.options_for("s3a://corpus") == {"endpoint_url": "http://corpus"}
    assert storage.options_for("s3://corpus-eu/x") == {"endpoint_url": "http://aws"}  # on `/` boundaries
    assert storage.options_for("s3://runs/team/step-1/out") == {"endpoint_url": "http://team"}
    assert storage.options_for("s3://runs/teammate") == {"endpoint_url": "http://aws"}
    assert storage.options_for("gs://any/thing") == {"token": "anon"}
    assert storage.options_for("/local/path") == storage.options_for("memory://x") == {}
    assert Storage({"s3://corpus": {"a": 1}}).options_for("s3://other/x") == {}


def test_one_object_applies_to_the_prefix_s_protocol_as_before():
    flat = {"endpoint_url": "http://minio"}
    assert storage_from(flat, "s3://runs/x").options_for("s3://corpus/y") == flat
    assert storage_from(flat, "s3://runs/x").options_for("gs://b/y") == {}
    assert not storage_from(flat, "/local/prefix")  # a local prefix takes none
    keyed = {"s3://corpus": flat}
    assert storage_from(keyed, "/local/prefix").options_for("s3://corpus/y") == flat  # inputs still get theirs
    assert storage_from(Storage(keyed), "gs://b") == Storage(keyed)


def test_neither_repr_nor_str_shows_a_value_and_storage_pickles():
    import pickle

    storage = Storage({"s3://corpus": {"secret": "sk-NEVER-SHOWN"}, "gs://": {"token": "tok-NEVER-SHOWN"}})
    where = storage.location("s3://corpus/a")
    for text in (repr(storage), str(storage), repr(where), str(where), f"{storage!r} {where}"):
        assert "NEVER-SHOWN" not in text
    assert "s3://corpus" in repr(storage) and where.options == {"secret": "sk-NEVER-SHOWN"}
    assert pickle.loads(pickle.dumps(storage)) == storage
    with pytest.raises(AttributeError):
        storage._by_key = {}


@pytest.mark.parametrize("value, message", [
    ({"s3://corpus": {"key": "k"}, "endpoint_url": "http://x"},
     r"key 'endpoint_url' is an option name beside location keys \('s3://corpus'\)"),
    ({"s3://corpus": "http://127.0.0.1:9000"},
     r"the value of 's3://corpus' is a string, not an object of options; write \"s3://corpus\": \{\"endpoint_url\""),
    ({"s3://corpus": ["x"]}, r"the value of 's3://corpus' is list, not an object of options"),
    ({"s3:/corpus": {"key": "k"}}, r"key 's3:/corpus' is neither an option name .* nor a location"),
    ({"/data": {"key": "k"}, "s3://b": {}}, r"key '/data' is an option name beside location keys"),
    ({"file://data": {"key": "k"}}, r"key 'file://data': local paths and memory:// take no storage options"),
    ({"s3:///corpus": {}}, r"key 's3:///corpus' has an empty bucket or path part; write it as s3://BUCKET"),
    ({"gcs://": {"token": "anon"}, "gs://": {"token": "x"}}, r"two keys name the location 'gs://'"),
    ({"s3://a": {"s3://b": {}}}, r"the options of 's3://a' have the key 's3://b'.*locations cannot be nested"),
])
def test_a_malformed_map_is_one_clear_error(value, message):
    with pytest.raises(ExecutorError, match=message):
        storage_from(value, "s3://runs/x", source="--storage-options")


def test_the_flag_and_the_variable_refuse_a_malformed_map_before_anything_opens():
    with pytest.raises(ExecutorError, match=r"^--storage-options: the value of 's3://corpus' is a string"):
        location.storage_options_from('{"s3://corpus": "oops"}', {})
    with pytest.raises(ExecutorError, match=r"^EXECUTOR_STORAGE_OPTIONS: key 'key' is an option name"):
        location.storage_options_from(None, {"EXECUTOR_STORAGE_OPTIONS": '{"s3://a": {}, "key": "k"}'})
    with pytest.raises(ExecutorError, match=r"^Options\(storage_options=...\): the value of 's3://a' is int"):
        step = executor.ExecutorStep("see/x", see_options, SeeConfig("s3://a", 0, executor.this_output_path()))
        executor.plan([step], prefix="memory://x", storage_options={"s3://a": 1})


# -- no process-wide options: two runs, two threads --------------------------------------------------

@dataclass(frozen=True)
class SeeConfig:
    probe: str  # a URL whose options the step reports
    pause_s: float
    output_path: str


def see_options(config: SeeConfig) -> dict:
    """A step: the endpoint its storage has for `probe`, read twice around a pause (the other run's
    step runs meanwhile on another thread of this process)."""
    import time

    first = executor.current_storage().options_for(config.probe).get("endpoint_url")
    time.sleep(config.pause_s)
    return {"before": first, "after": executor.current_storage().options_for(config.probe).get("endpoint_url")}


def test_two_runs_on_two_threads_each_see_only_their_own_options():
    """memory:// prefixes run steps on threads of this process: the strictest case (one process,
    overlapping steps). A module-level registry would hand one run's options to the other."""
    results: dict[str, dict] = {}

    def one_run(name: str) -> None:
        step = executor.ExecutorStep(f"see/{name}", see_options,
                                     SeeConfig("s3://corpus/in", 0.5, executor.this_output_path()))
        keyed = {"s3://corpus": {"endpoint_url": f"http://{name}"}, "s3://other": {"endpoint_url": "http://no"}}
        run = executor.run([step], prefix=f"memory://locations-{name}", runner="inline", storage_options=keyed)
        run.raise_on_failure()
        results[name] = executor.load_result(step, prefix=f"memory://locations-{name}", storage_options=keyed)

    threads = [threading.Thread(target=one_run, args=(name,)) for name in ("left", "right")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {name: {"before": f"http://{name}", "after": f"http://{name}"} for name in ("left", "right")}
    assert location.current_storage() == Storage()  # nothing stayed behind in this thread either
