"""read_many through RetryingStore: a transient failure re-reads its chunk only, in order."""

from __future__ import annotations

import pytest

from executor.engine.store import TransientStoreError
from executor.engine.store.memory import MemoryStore
from executor.engine.store.retry import READ_MANY_CHUNK, RetryingStore, RetryPolicy


class FailingOnce:
    """Every batch of read_many fails once, transiently, before it is answered."""

    def __init__(self, inner):
        self.inner, self.root, self.batches, self.failed = inner, inner.root, [], set()

    def read_many(self, keys):
        keys = list(keys)
        self.batches.append(len(keys))
        if keys[0] not in self.failed:
            self.failed.add(keys[0])
            raise TransientStoreError(f"reset while reading {keys[0]}")
        return self.inner.read_many(keys)


def test_a_transient_failure_re_reads_only_its_chunk_and_keeps_the_order(tmp_path):
    inner = MemoryStore(f"memory://read-many-{tmp_path.name}")
    keys = [f"k{i:05d}" for i in range(READ_MANY_CHUNK + 10)]
    for i, key in enumerate(keys[::3]):
        inner.create_if_absent(key, str(i).encode())
    flaky = FailingOnce(inner)
    store = RetryingStore(flaky, RetryPolicy(max_attempts=3), sleep=lambda s: None)
    assert list(store.read_many(keys)) == list(inner.read_many(keys))
    assert flaky.batches == [READ_MANY_CHUNK, READ_MANY_CHUNK, 10, 10]  # each chunk failed once, re-read once
    assert store.counts.retries == 2


def test_a_chunk_that_keeps_failing_names_the_operation_and_a_key(tmp_path):
    class Down:
        root = "memory://down"

        def read_many(self, keys):
            raise TransientStoreError("503")

    store = RetryingStore(Down(), RetryPolicy(max_attempts=2), sleep=lambda s: None)
    with pytest.raises(TransientStoreError, match=r"read_many 'a \(\+1 more\)'.*after 2 attempts"):
        list(store.read_many(["a", "b"]))


def test_a_local_store_reads_many_keys_on_threads_in_waves_in_order(tmp_path, monkeypatch):
    """Past READ_THREADS_FROM keys a local store reads chunks on threads: the answers are read()'s,
    in order, absent keys None, across several waves (made small here so that 3 are crossed)."""
    import threading

    from executor.engine.store import local

    monkeypatch.setattr(local, "READ_WAVE", 4 * local.READ_CHUNK)
    store = local.LocalStore(str(tmp_path))
    keys = [f"s{i:05d}/.executor/status.json" for i in range(local.READ_THREADS_FROM + 2 * local.READ_WAVE)]
    for i, key in enumerate(keys):
        if i % 7:
            store.create_if_absent(key, f"status {i}".encode())
    expected = [store.read(key) for key in keys]
    threads = set()
    read = local.LocalStore._read

    def noting(self, key, root):
        threads.add(threading.get_ident())
        return read(self, key, root)

    monkeypatch.setattr(local.LocalStore, "_read", noting)
    answers = list(store.read_many(keys))
    assert answers == expected
    assert [a is None for a in answers] == [i % 7 == 0 for i in range(len(keys))]
    assert threading.get_ident() not in threads and len(threads) > 1  # read on the pool's threads


def test_a_failing_local_read_among_many_raises_a_store_error_naming_the_key(tmp_path):
    from executor.engine.store import StoreError, local

    store = local.LocalStore(str(tmp_path))
    keys = [f"s{i:05d}/.executor/status.json" for i in range(local.READ_THREADS_FROM + 10)]
    for key in keys:
        store.create_if_absent(key, b"{}")
    (tmp_path / keys[500]).unlink()
    (tmp_path / keys[500]).mkdir()  # a directory where the status should be: os.read fails
    with pytest.raises(StoreError, match=f"cannot read .*{keys[500]}"):
        list(store.read_many(keys))


def _listed_by_os_walk(root, prefix, suffix):
    """What the local listing promises, written the plain way: os.walk, relpath, a read of each."""
    import os

    found = {}
    for directory, subdirectories, names in os.walk(root):
        for name in names:
            key = os.path.relpath(os.path.join(directory, name), root)
            if key.startswith(prefix) and key.endswith(suffix) and not name.endswith(".lock") and ".tmp-" not in name:
                found[key] = open(os.path.join(root, key), "rb").read()
    return found


@pytest.mark.parametrize("prefix,suffix", [("", "/status.json"), ("b-", "/status.json"), ("a/", ""), ("b-1/x", "")])
def test_a_local_listing_is_the_plain_walks_in_its_order(tmp_path, prefix, suffix):
    """The local store's listing (a scandir walk, then read_many on threads past 512 keys) lists
    what os.walk finds, in its order: nested keys, a prefix ending inside a name, side files and
    links to directories left out, enough keys for the threaded reads."""
    from executor.engine.store import local

    store = local.LocalStore(str(tmp_path))
    keys = [f"{top}-{i}/{sub}status.json" for top in ("a", "b") for i in range(300) for sub in ("", "x/y/")]
    for key in keys + ["a/status.json", "b-1/xz", "b-1/x/other.json"]:
        store.create_if_absent(key, key.encode())
    (tmp_path / "b-1" / "status.json.tmp-123").write_bytes(b"partial")
    (tmp_path / "b-2" / "linked").symlink_to(tmp_path / "b-3", target_is_directory=True)
    listed = store.list_generations(prefix, suffix)
    expected = _listed_by_os_walk(str(tmp_path), prefix, suffix)
    assert list(listed) == list(expected) and expected
    assert listed == {key: local._generation(data) for key, data in expected.items()}
    assert not any("linked" in key or key.endswith(".lock") for key in listed)
