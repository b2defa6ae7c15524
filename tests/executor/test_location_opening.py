"""executor.engine.prefix.location, opening: which filesystem and store a location gets, with which
options, and the one-line error each way a bucket can fail its first listing."""

from __future__ import annotations

import copy
import inspect
import pickle
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from executor.core.errors import ExecutorError
from executor.core.locations import Location, Storage
from executor.engine.prefix import location
from executor.engine.store import StoreError, TransientStoreError
from executor.engine.store.memory import MemoryStore
from executor.engine.store.retry import RetryingStore
from tests.emulators import s3_emulator  # noqa: F401  (session fixture)

SETTINGS = "the storage options (--storage-options JSON or EXECUTOR_STORAGE_OPTIONS)"


def test_no_flag_and_no_variable_mean_no_options():
    assert location.storage_options_from(None, {}) == {}
    assert location.storage_options_from(None, {"EXECUTOR_STORAGE_OPTIONS": "  \n"}) == {}
    assert location.storage_options_from("", {"EXECUTOR_STORAGE_OPTIONS": '{"token": "anon"}'}) == {}


def test_a_local_path_gets_a_filesystem_that_makes_parent_folders_on_write(tmp_path):
    fs, path = location.url_to_fs(f"file://{tmp_path}/a/b/c.txt", Storage())
    assert path == f"{tmp_path}/a/b/c.txt"
    with fs.open(path, "wb") as f:  # like an object store: no mkdir first
        f.write(b"x")
    assert (tmp_path / "a" / "b" / "c.txt").read_bytes() == b"x"
    for url in (f"file://{tmp_path}/d/e.txt", f"FILE://{tmp_path}/f/g.txt"):  # a Location made by hand, as written
        fs, path = location.filesystem_of(Location(url))
        fs.pipe_file(path, b"y")
    assert (tmp_path / "d" / "e.txt").read_bytes() == (tmp_path / "f" / "g.txt").read_bytes() == b"y"
    with location.open_file(f"{tmp_path}/h/i.txt", mode="wb", storage=Storage()) as f:  # mode by name
        f.write(b"z")
    assert (tmp_path / "h" / "i.txt").read_bytes() == b"z"


def test_an_object_store_listing_is_never_answered_from_a_cache(s3_emulator):
    """Other processes write under the same prefix: a listing made before they wrote must not hide
    their files afterwards."""
    prefix = s3_emulator.fresh_prefix("listing")
    storage = Storage({"s3://": s3_emulator.storage_options})
    store = location.open_store(prefix, storage, check=False)
    store.create_if_absent("first", b"1")
    fs, path = location.url_to_fs(prefix, storage)
    assert [p.rsplit("/", 1)[1] for p in fs.ls(path)] == ["first"]
    store.create_if_absent("second", b"2")  # another writer (the store's own client)
    assert [p.rsplit("/", 1)[1] for p in fs.ls(path)] == ["first", "second"]


def test_a_files_own_options_override_its_locations():
    storage = Storage({"s3://corpus": {"endpoint_url": "http://127.0.0.1:1", "anon": True}})
    fs, _ = location.url_to_fs("s3://corpus/k", storage)
    assert fs.storage_options["endpoint_url"] == "http://127.0.0.1:1" and fs.storage_options["anon"] is True
    fs, _ = location.url_to_fs("s3://corpus/k", storage, endpoint_url="http://127.0.0.1:2")
    assert fs.storage_options["endpoint_url"] == "http://127.0.0.1:2" and fs.storage_options["anon"] is True
    opened = location.open_file("s3://corpus/k", storage=storage, storage_options={"endpoint_url": "http://127.0.0.1:3"})
    assert opened.fs.storage_options["endpoint_url"] == "http://127.0.0.1:3"
    assert opened.mode == "rb" and opened.path == "corpus/k"


class StrictFileSystem(MemoryFileSystem):
    """An fsspec backend that checks its options when it is made (gcsfs and s3fs check later); its
    name sorts before "file", so only an exact test sends `file` paths to the local filesystem."""

    protocol = "checkedfs"

    def __init__(self, *, known: int = 0):
        super().__init__()


fsspec.register_implementation("checkedfs", StrictFileSystem, clobber=True)


def test_an_option_the_backend_does_not_take_names_the_protocol_and_the_fix():
    assert isinstance(location.url_to_fs("checkedfs://b/k", Storage({"checkedfs://": {"known": 1}}))[0],
                      StrictFileSystem)
    with pytest.raises(ExecutorError, match=r"^storage options for checkedfs:// paths: .*'unknown'\. "
                                            r"Fix the keys in --storage-options / EXECUTOR_STORAGE_OPTIONS"):
        location.url_to_fs("checkedfs://b/k", Storage({"checkedfs://": {"unknown": 1}}))


def test_a_deferred_filesystem_opens_only_when_used_and_copies_without_opening():
    where = Location("checkedfs://b/k", {"unknown": 1, "secret": "sk-never-shown"})
    deferred = location.DeferredFilesystem(where)
    assert repr(deferred) == "DeferredFilesystem(Location('checkedfs://b/k', options hidden))"
    for twin in (copy.copy(deferred), pickle.loads(pickle.dumps(deferred))):  # never opens the filesystem
        assert twin.where == where and "opened" not in vars(twin)
    assert "opened" not in vars(deferred)
    with pytest.raises(ExecutorError, match="'unknown'"):  # opened at first use: its errors come then
        deferred.ls("b")
    local = location.DeferredFilesystem(Location("memory://deferred"))
    assert "memory" in local.protocol and "opened" in vars(local)
    assert location.opened(local) is local.opened and location.opened(local.opened) is local.opened


@pytest.mark.parametrize("path,bare", [
    ("gs://b/k/", "b/k"), ("s3://b/k", "b/k"), ("memory://m/k/", "/m/k"), ("memory:///m/k", "/m/k"),
    ("/tmp/x/", "/tmp/x"), ("file:///tmp/x", "/tmp/x"),
])
def test_bare_path_is_the_form_listings_return(path, bare):
    assert location.bare_path(path) == bare


def test_a_local_or_memory_prefix_is_never_probed_or_wrapped(tmp_path):
    store = location.open_store(f"memory://probe-{uuid.uuid4().hex[:8]}")
    assert isinstance(store, MemoryStore)
    store, fs = location.open_location(str(tmp_path / "p"))
    assert not isinstance(store, RetryingStore) and "file" in location.opened(fs).protocol
    fs = location.open_filesystem(f"file://{tmp_path}/q")
    fs.pipe_file(f"{tmp_path}/q/a/b.txt", b"x")  # a filesystem, making parent folders like the others
    assert (tmp_path / "q" / "a" / "b.txt").read_bytes() == b"x"


def test_an_unreachable_bucket_is_probed_only_when_asked():
    storage = {"endpoint_url": "http://127.0.0.1:9", "key": "k", "secret": "s"}  # nothing listens on port 9
    store = location.open_store("s3://nowhere/p", storage, check=False)
    assert isinstance(store, RetryingStore)  # object stores retry; nothing asked the endpoint yet
    for opening in (location.open_store, location.open_filesystem):
        with pytest.raises(ExecutorError, match=r"^storage: cannot reach s3://nowhere/p .*endpoint_url"):
            opening("s3://nowhere/p", storage)


def test_a_store_option_the_backend_does_not_take_is_one_line_naming_the_prefix():
    with pytest.raises(ExecutorError, match=r"^storage options for s3://b/p: .*no_such_option.* Fix the keys"):
        location.open_store("s3://b/p", {"no_such_option": 1})  # refused by the first listing
    for prefix in ("s3://b/p", "gs://b/p"):  # refused as the store is made, before any listing
        with pytest.raises(ExecutorError, match=rf"^storage options for {prefix}: .*'prefix'\. Fix the keys in "
                                                r"--storage-options / EXECUTOR_STORAGE_OPTIONS"):
            location.open_store(prefix, {"prefix": "other"})


def test_the_flag_s_value_may_be_the_last_argument_and_argv_may_be_long():
    assert location.pop_storage_options_flag(["--prefix", "p", "--storage-options", "{}"]) == ("{}", ["--prefix", "p"])
    long = [f"--x{i}" for i in range(300)]
    assert location.pop_storage_options_flag(long + ["--storage-options={}"]) == ("{}", long)
    assert location.redact_argv(long) == long
    with pytest.raises(ExecutorError, match="needs a JSON object"):
        location.pop_storage_options_flag(long + ["--storage-options"])


class Listing:
    """A store whose first listing fails with `error` (nothing else is ever called)."""

    root = "gs://probe/p"

    def __init__(self, error: BaseException):
        self.error, self.calls = error, 0

    def list_generations(self, prefix, suffix):
        self.calls += 1
        assert (prefix, suffix) == (location.PROBE_KEY + "/", "")  # a listing of one absent key
        raise self.error


@pytest.mark.parametrize("error,message", [
    (StoreError("bucket 'probe' does not exist."),
     f"storage: gs://probe/p: bucket 'probe' does not exist ({SETTINGS}). Nothing was written."),
    (TypeError("unexpected keyword\n   'tokn'"),
     f"storage options for gs://probe/p: unexpected keyword 'tokn'. Fix the keys in {SETTINGS}."),
    (KeyError("credentials"),
     f"storage: gs://probe/p did not answer a first read (KeyError: 'credentials'); check {SETTINGS}. "
     "Nothing was written."),
])
def test_each_way_a_first_listing_fails_is_one_line(error, message):
    store = Listing(error)
    with pytest.raises(ExecutorError) as raised:
        location.check_reachable(store, "gs://probe/p")
    assert str(raised.value) == message
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    assert store.calls == 1  # a permanent error is not retried


def test_a_transient_first_listing_is_tried_three_times_within_four_seconds(monkeypatch):
    """docs/storage.md: tried 3 times within 4 s. The retries' sleeps and clock are injected (a clock
    that moves only when the probe sleeps), so the figure is the probe's own, not the machine's load."""
    import functools

    from executor.engine.store import retry

    slept: list[float] = []
    now = [0.0]

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(retry, "RetryingStore", functools.partial(retry.RetryingStore, sleep=sleep,
                                                                  clock=lambda: now[0]))
    store = Listing(TransientStoreError("503 Service Unavailable"))
    with pytest.raises(ExecutorError, match=r"^storage: cannot reach gs://probe/p \(list_generations .*"
                                            r"after 3 attempts.*503 Service Unavailable\); check endpoint_url"):
        location.check_reachable(store, "gs://probe/p")
    assert store.calls == 3 and len(slept) == 2
    assert 0.1 <= slept[0] <= 0.2 and 0.2 <= slept[1] <= 0.4 and now[0] < 4  # backoff 0.1-0.2 s, then 0.2-0.4 s


def test_redacting_argv_hides_only_the_options_value():
    for argv, redacted in ((["--prefix", "s3://b", "--storage-options", '{"secret": "S"}', "--dry-run"],
                            ["--prefix", "s3://b", "--storage-options", "***", "--dry-run"]),
                           (["run", '--storage_options={"secret": "S"}', "-v"], ["run", "--storage_options=***", "-v"]),
                           (["--storage-options"], ["--storage-options"]), ([], [])):
        assert location.redact_argv(argv) == redacted


def test_a_long_error_is_cut_to_one_line_of_400_characters():
    store = Listing(StoreError("x" * 500))
    with pytest.raises(ExecutorError) as raised:
        location.check_reachable(store, "gs://probe/p")
    detail = str(raised.value).split("gs://probe/p: ", 1)[1].split(" (the storage options", 1)[0]
    assert detail == "x" * 399 + "…"
    assert location._one_line("a\n b\t c ") == "a b c" and location._one_line("y" * 400) == "y" * 400


def test_a_first_listing_that_never_answers_is_given_up_on_at_the_deadline():
    release = threading.Event()

    class Silent(Listing):
        def list_generations(self, prefix, suffix):
            self.calls += 1
            release.wait(30)  # a hung connection; released when the test ends
            return {}

    started = time.monotonic()
    try:
        with pytest.raises(ExecutorError, match=r"^storage: no answer from gs://probe/p within 0\.5s; check "
                                                r"endpoint_url and the credentials \(key/secret, token\) in the "
                                                r"storage options .* Nothing was written\.$"):
            location.check_reachable(Silent(None), "gs://probe/p", timeout_s=0.5)
        assert 0.5 <= time.monotonic() - started < 5
        hung = [t for t in threading.enumerate() if t.name == "storage-probe"]
        assert hung and all(t.daemon for t in hung)  # a hung probe never keeps the process from exiting
    finally:
        release.set()


def test_the_probe_s_numbers_are_the_docs():
    """docs/storage.md: within 10 s of opening the prefix, connecting included; a first listing is
    tried 3 times within 4 s."""
    docs = " ".join((Path(__file__).parents[2] / "docs" / "storage.md").read_text().split())
    assert ("within 10 s of opening the prefix, finding credentials and connecting included (a first listing is "
            "tried 3 times within 4 s; loading gcsfs or s3fs comes first)") in docs
    assert inspect.signature(location.open_store).parameters["deadline_s"].default == location.PROBE_DEADLINE_S
    assert (location.PROBE_ATTEMPTS, location.PROBE_BUDGET_S, location.PROBE_DEADLINE_S) == (3, 4.0, 10.0)
    assert inspect.signature(location.check_reachable).parameters["timeout_s"].default == location.PROBE_DEADLINE_S


def test_a_prefix_is_opened_without_importing_fsspec_until_its_filesystem_is_used(tmp_path):
    """A no-op re-run reads statuses through the coordination store and never needs fsspec (a
    tenth of a second to import); a fresh interpreter, as a run starts."""
    code = ("import sys\nimport executor.engine.prefix.location as location\n"
            f"store, fs = location.open_location({str(tmp_path)!r})\n"
            "store.list_generations('a/', '/status.json'); repr(fs)\n"
            "print('fsspec' in sys.modules)\nfs.ls('/')\nprint('fsspec' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


def test_the_store_options_may_be_passed_by_name(tmp_path):
    store = location.open_store(prefix=f"memory://named-{uuid.uuid4().hex[:8]}", storage=None, check=False)
    assert isinstance(store, MemoryStore)


@pytest.mark.parametrize("prefix, package, backend", [("s3://bucket/p", "s3fs", "executor.engine.store.s3"),
                                                      ("gs://bucket/p", "gcsfs", "executor.engine.store.gcs")])
def test_a_bucket_prefix_without_its_package_installed_names_the_package_to_install(monkeypatch, prefix, package,
                                                                                     backend):
    """The backend is imported before the probe's clock starts; if its package is missing, that import's
    error is not the answer: opening the store says which package the prefix needs and how to add it."""
    monkeypatch.setitem(sys.modules, package, None)  # `import s3fs` raises ImportError, as when not installed
    monkeypatch.delitem(sys.modules, backend, raising=False)  # imported afresh (and failing) here
    with pytest.raises(ExecutorError, match=rf"^storage: {prefix}: prefix '{prefix}' needs {package}: install it "
                                            rf"with `uv add {package}`") as caught:
        location.open_store(prefix)
    assert str(caught.value).endswith("Nothing was written.")


@pytest.mark.parametrize("prefix, backend, other", [("s3://bucket/p", "executor.engine.store.s3", "executor.engine.store.gcs"),
                                                    ("gs://bucket/p", "executor.engine.store.gcs", "executor.engine.store.s3")])
def test_loading_the_prefix_s_backend_comes_before_the_probe_s_deadline(monkeypatch, prefix, backend, other):
    """docs/storage.md: the first listing's 10 s cover credentials and connecting; loading gcsfs or
    s3fs (seconds on a loaded machine) comes first, outside them, and only the prefix's own backend."""
    monkeypatch.delitem(sys.modules, backend, raising=False)
    monkeypatch.delitem(sys.modules, other, raising=False)
    loaded_when_the_clock_starts = []

    def within(timeout_s, where, work):
        loaded_when_the_clock_starts.append((backend in sys.modules, other in sys.modules, where))
        raise ExecutorError("stopped here: the probe is not the point")

    monkeypatch.setattr(location, "_within", within)
    with pytest.raises(ExecutorError, match="stopped here"):
        location.open_store(prefix)
    assert loaded_when_the_clock_starts == [(True, False, prefix)]


class _ReadOnce(list):
    """argv that counts reads of its items and refuses a read past twice its length: a parse that
    loses its place fails here at once, instead of looping until a clock stops it."""

    def __init__(self, items):
        super().__init__(items)
        self.reads = 0

    def __getitem__(self, index):
        self.reads += 1
        assert self.reads <= 2 * len(self), f"argv read {self.reads} times for {len(self)} arguments: the parse does not end"
        return super().__getitem__(index)


@pytest.mark.parametrize("argv, value, rest", [
    (["--prefix", "p", "--storage-options", "{}", "--runner", "inline"], "{}", ["--prefix", "p", "--runner", "inline"]),
    (["--storage_options={}", "x"], "{}", ["x"]),
    (["a", "b", "c"], None, ["a", "b", "c"]),
])
def test_taking_the_flag_out_reads_each_argument_once_and_keeps_the_rest_in_order(argv, value, rest):
    counted = _ReadOnce(argv)
    assert location.pop_storage_options_flag(counted) == (value, rest)
    assert counted.reads == len(argv)  # each argument read once (a flag's value as the flag's)
