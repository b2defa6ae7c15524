"""The coordination-store contract: the same tests for local, memory, GCS (emulator), S3 (emulator)."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

from executor.engine.store import CoordinationStore, Versioned
from executor.engine.store.local import LocalStore
from tests.store import cas_counter
from tests.store.conftest import StoreLocation

# Does writing identical bytes again give a new generation? GCS: yes (object generations);
# memory: yes (a counter); local: no (a content hash); S3: no (the ETag is the MD5 of the bytes).
# The executor bumps a sequence number in every status write, so its generations always change.
NEW_GENERATION_ON_IDENTICAL_REWRITE = {"local": False, "memory": True, "gcs": True, "s3": False}

KEY = "step-abc123/.executor/status.json"


def test_read_of_an_absent_key_is_none(store):
    assert store.read(KEY) is None


def test_create_then_read_gives_the_bytes_and_generation_written(store):
    generation = store.create_if_absent(KEY, b'{"status": "RUNNING"}')
    assert isinstance(generation, str) and generation
    assert store.read(KEY) == Versioned(b'{"status": "RUNNING"}', generation)


def test_create_when_present_returns_none_and_keeps_the_object(store):
    generation = store.create_if_absent(KEY, b"first")
    assert store.create_if_absent(KEY, b"second") is None
    assert store.read(KEY) == Versioned(b"first", generation)


def test_replace_with_the_current_generation_succeeds_and_changes_it(store):
    first = store.create_if_absent(KEY, b"seq=1")
    second = store.replace_if_generation(KEY, b"seq=2", first)
    assert second is not None and second != first
    assert store.read(KEY) == Versioned(b"seq=2", second)


def test_replace_with_a_stale_generation_returns_none_and_keeps_the_object(store):
    first = store.create_if_absent(KEY, b"seq=1")
    second = store.replace_if_generation(KEY, b"seq=2", first)
    assert store.replace_if_generation(KEY, b"seq=3 from a stale holder", first) is None
    assert store.read(KEY) == Versioned(b"seq=2", second)


def test_replace_of_an_absent_key_returns_none(store):
    generation = store.create_if_absent("other/status.json", b"x")
    assert store.replace_if_generation(KEY, b"y", generation) is None
    assert store.read(KEY) is None


def test_replace_never_creates_whatever_generation_it_is_given(store):
    """Generation "0" is GCS's "only if absent": a replace passing it on must not become a create.
    str(0), not the literal: a generation computed at run time is not the interned "0"."""
    for generation in (str(0), "1", "not-a-generation", '"an-etag"'):
        assert store.replace_if_generation(KEY, b"y", generation) is None, generation
        assert store.read(KEY) is None, generation


def test_delete_removes_the_object_and_tolerates_absence(store):
    store.create_if_absent(KEY, b"x")
    store.delete(KEY)
    assert store.read(KEY) is None
    store.delete(KEY)  # absent: no error
    assert store.create_if_absent(KEY, b"again") is not None


def test_generation_on_identical_rewrite_is_documented(store, store_location):
    first = store.create_if_absent(KEY, b"same bytes")
    second = store.replace_if_generation(KEY, b"same bytes", first)
    assert second is not None
    assert (second != first) == NEW_GENERATION_ON_IDENTICAL_REWRITE[store_location.backend]


def test_arbitrary_bytes_round_trip(store):
    payloads = {"empty": b"", "binary": bytes(range(256)) * 64,
                "looks-like-multipart": b"\r\n--==0==\r\nContent-Type: text/plain\r\n\r\n--==0==--"}
    for name, data in payloads.items():
        generation = store.create_if_absent(f"bytes/{name}", data)
        assert store.read(f"bytes/{name}") == Versioned(data, generation), name


def test_reading_many_keys_at_once_gives_what_reading_each_gives(store):
    """Planning and every view of a prefix read statuses through the store's read_many (local: one
    open root, one read call for a small file; object stores: many requests in flight). Sizes
    around the local read size; more keys than an object store keeps in flight, in order."""
    sizes = {"small": 10, "at-read-size": 1 << 16, "past-read-size": (1 << 16) + 1, "large": 300_001}
    for name, size in sizes.items():
        store.create_if_absent(f"many/{name}/status.json", bytes(range(256)) * (size // 256) + b"x" * (size % 256))
    keys = [f"many/{name}/status.json" for name in sizes] + ["many/absent/status.json", "nowhere/at/all.json"]
    read_each = [store.read(key) for key in keys]
    assert [len(v.data) if v else None for v in read_each] == [*sizes.values(), None, None]
    assert list(store.read_many(keys)) == read_each
    assert list(store.read_many([])) == []
    many = [f"order/{i:03d}" for i in range(150)]
    for i, key in enumerate(many[::2]):
        store.create_if_absent(key, str(i).encode())
    assert [v.data if v else None for v in store.read_many(many)] == [
        str(i // 2).encode() if i % 2 == 0 else None for i in range(150)]


def test_read_many_is_part_of_the_protocol_of_every_store_and_its_retrying_wrapper(store):
    from executor.engine.store.retry import RetryingStore

    store.create_if_absent(KEY, b"x")
    for wrapped in (store, RetryingStore(store)):
        assert isinstance(wrapped, CoordinationStore)
        assert [v.data if v else None for v in wrapped.read_many([KEY, "absent"])] == [b"x", None]


def test_reading_many_keys_of_a_local_prefix_not_yet_created_finds_none(tmp_path):
    assert list(LocalStore(str(tmp_path / "not-yet")).read_many(["a/status.json", "b/status.json"])) == [None, None]


def test_keys_with_spaces_plus_and_unicode(store):
    key = "runs/my step+v2 é/.executor/status.json"
    generation = store.create_if_absent(key, b"x")
    assert store.read(key) == Versioned(b"x", generation)
    assert store.list_generations("runs/", "status.json") == {key: generation}


def test_list_generations_filters_by_prefix_and_suffix(store):
    expected = {}
    for step in ("a-1", "b-2", "c-3"):
        key = f"{step}/.executor/status.json"
        expected[key] = store.create_if_absent(key, step.encode())
        store.create_if_absent(f"{step}/.executor/record.json", b"{}")
        store.create_if_absent(f"{step}/data/shard-0.status.json.bin", b"{}")
    store.create_if_absent("runs/exp-1.json", b"{}")
    assert store.list_generations("", "/.executor/status.json") == expected
    b_key = "b-2/.executor/status.json"
    assert store.list_generations("b-", "/.executor/status.json") == {b_key: expected[b_key]}
    assert store.list_generations("zzz/", "status.json") == {}
    assert store.list_generations("b-2/.exec", "status.json") == {b_key: expected[b_key]}  # a name's start
    everything = store.list_generations("", "")  # no suffix: objects only, never a store's side files
    assert set(everything) == {*expected, "runs/exp-1.json"} | {f"{k}/.executor/record.json" for k in ("a-1", "b-2", "c-3")} \
        | {f"{k}/data/shard-0.status.json.bin" for k in ("a-1", "b-2", "c-3")}, sorted(everything)
    for key, generation in expected.items():
        assert store.read(key).generation == generation


def test_list_generations_follows_pages(store, store_location, monkeypatch):
    if store_location.backend in ("gcs", "s3"):
        monkeypatch.setattr(f"executor.engine.store.{store_location.backend}._PAGE_SIZE", 3)
    expected = {f"s{i:02d}/status.json": store.create_if_absent(f"s{i:02d}/status.json", b"x") for i in range(10)}
    assert store.list_generations("", "status.json") == expected


def test_two_clients_of_one_prefix_see_the_same_objects(store, store_location):
    other = store_location.open()
    generation = store.create_if_absent(KEY, b"x")
    assert other.read(KEY) == Versioned(b"x", generation)
    assert other.create_if_absent(KEY, b"y") is None
    assert other.replace_if_generation(KEY, b"z", generation) is not None
    assert store.replace_if_generation(KEY, b"w", generation) is None


# Moto answers a request in ~5 ms and serialises them: fewer rounds keep S3 under a few seconds.
ROUNDS_PER_THREAD = {"local": 6, "memory": 10, "gcs": 6, "s3": 3}


def test_concurrent_cas_from_8_threads_has_exactly_one_winner_per_round(store, store_location):
    threads, rounds = 8, ROUNDS_PER_THREAD[store_location.backend]
    results: list[dict] = []
    barrier = threading.Barrier(threads)

    def writer(i: int) -> None:
        barrier.wait()
        results.append(cas_counter.increment(store, "counter", f"w{i}", rounds,
                                             think=lambda: time.sleep(0.001)))

    workers = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    total = threads * rounds
    state = cas_counter.load(store, "counter")
    assert state["count"] == total
    wins = sorted(v for r in results for v in r["wins"])
    errors = sum(r["errors"] for r in results)
    assert len(wins) == len(set(wins)), "two writers won the same round"
    if errors == 0:
        assert wins == list(range(1, total + 1))
    assert sum(r["lost"] for r in results) > 0, "no contention: the test proved nothing"


def test_local_cas_across_processes(tmp_path):
    prefix, processes, rounds = str(tmp_path / "store"), 4, 10
    # forkserver: no fork of this process (it holds emulator threads), one import for all workers
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.store.cas_counter"])
    with context.Pool(processes) as pool:
        results = pool.starmap(cas_counter.increment_in_process,
                               [(prefix, {}, "counter", f"pid-{i}", rounds) for i in range(processes)])
    from executor.engine.store import open_store
    state = cas_counter.load(open_store(prefix), "counter")
    wins = sorted(v for r in results for v in r["wins"])
    assert state["count"] == processes * rounds
    assert wins == list(range(1, processes * rounds + 1))
    assert os.path.exists(os.path.join(prefix, "counter"))


def test_a_sibling_prefix_sharing_a_name_prefix_is_invisible(store, store_location):
    sibling = StoreLocation(store_location.backend, store_location.prefix.rstrip("/") + "-sibling",
                            store_location.storage_options).open()
    sibling.create_if_absent(KEY, b"sibling's")
    assert store.read(KEY) is None
    assert store.list_generations("", "") == {}
    assert store.create_if_absent(KEY, b"mine") is not None
    assert sibling.read(KEY).data == b"sibling's"


def test_local_status_and_lock_files_get_the_mode_the_umask_gives(tmp_path):
    """As every other file a run writes: under umask 002 a group sharing a prefix (NFS, a shared
    disk) can read, lock and replace a status another member wrote; under 077 they stay the owner's."""
    sibling = KEY.replace("status.json", "record.json")  # its lock is made in a directory that exists
    for umask, mode in ((0o002, 0o664), (0o022, 0o644), (0o077, 0o600)):
        root = tmp_path / f"umask-{umask:03o}"
        store = LocalStore(str(root))
        old = os.umask(umask)
        try:
            created = store.create_if_absent(KEY, b"seq=1")
            store.create_if_absent(sibling, b"x")
            modes = {name: _mode(root / name) for name in (KEY, KEY + ".lock", sibling + ".lock")}
            store.replace_if_generation(KEY, b"seq=2", created)
            modes["replaced"] = _mode(root / KEY)
        finally:
            os.umask(old)
        assert modes == dict.fromkeys([KEY, KEY + ".lock", sibling + ".lock", "replaced"], mode), f"umask {umask:03o}"


def _mode(path) -> int:
    import stat

    return stat.S_IMODE(os.stat(path).st_mode)
