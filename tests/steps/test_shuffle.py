"""steps/dedup/shuffle.py: the column conversions give back what they were given, through an Arrow
file, for slices and many-chunk columns, on any Unicode text; a work tree on an object store is
removed one directory at a time, never listed whole."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steps.dedup.shuffle import (arrow_column, list_column, numpy_column, read_partition, remove_tree, take_strings,
                                 string_column, write_partitioned)

SCHEMA = pa.schema([("n", pa.int64()), ("u", pa.uint64()), ("x", pa.float64()), ("s", pa.string()),
                    ("l", pa.list_(pa.uint64()))])
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)  # any code point but surrogates


@settings(max_examples=30, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(-2**63, 2**63 - 1), st.integers(0, 2**64 - 1), st.floats(allow_nan=False),
                               text, st.lists(st.integers(0, 2**64 - 1), max_size=4)), min_size=1, max_size=40),
       partitions=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_columns_round_trip_through_partitioned_parquet(tmp_path_factory, rows, partitions, seed):
    directory = str(tmp_path_factory.mktemp("shuffle"))
    n, u, x, s, lists = map(list, zip(*rows))
    columns = {"n": np.array(n, np.int64), "u": np.array(u, np.uint64), "x": np.array(x, np.float64), "s": s,
               "l": [np.array(v, np.uint64) for v in lists]}
    partition = np.random.default_rng(seed).integers(0, partitions, len(rows))
    half = len(rows) // 2   # two writers: a partition is read back as several chunks
    for name, rows_of in (("a", slice(0, half)), ("b", slice(half, None))):
        part = {k: v[rows_of] for k, v in columns.items()}
        write_partitioned(directory, part, partition[rows_of], partitions, name)
    for p in range(partitions):
        table = read_partition(directory, p, SCHEMA)
        chosen = [i for i in range(half) if partition[i] == p] + [i for i in range(half, len(rows))
                                                                   if partition[i] == p]
        assert numpy_column(table, "n").tolist() == [n[i] for i in chosen]
        assert numpy_column(table, "u").tolist() == [u[i] for i in chosen]
        assert numpy_column(table, "x").tolist() == [x[i] for i in chosen]
        assert string_column(table, "s") == [s[i] for i in chosen]
        assert [v.tolist() for v in list_column(table, "l")] == [lists[i] for i in chosen]


def test_a_sliced_column_reads_from_its_offset():
    table = pa.Table.from_arrays([arrow_column(np.arange(10, dtype=np.int32)).slice(3, 4),
                                  arrow_column(["a", "\u00e9", "\u6771", "\U0001f600", "z"]).slice(1, 4)],
                                 names=["i", "s"])
    assert numpy_column(table, "i").tolist() == [3, 4, 5, 6]
    assert string_column(table, "s") == ["\u00e9", "\u6771", "\U0001f600", "z"]


def test_an_absent_partition_reads_as_an_empty_table(tmp_path):
    table = read_partition(str(tmp_path), 3, SCHEMA)
    assert table.num_rows == 0 and table.schema == SCHEMA
    assert numpy_column(table, "n").dtype == np.int64 and string_column(table, "s") == []


def test_a_lone_surrogate_is_refused():
    with pytest.raises(UnicodeEncodeError):
        arrow_column(["ok", "\ud800"])


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_work_tree_is_removed_one_directory_at_a_time(request, tmp_path, monkeypatch, where):
    from executor.core.locations import Storage
    from executor.engine.prefix import location

    if where == "s3":
        emulator = request.getfixturevalue("s3_emulator")
        storage = Storage({"s3://": emulator.storage_options})
        root = emulator.fresh_prefix("work")
    else:
        storage, root = Storage(), str(tmp_path / "work")
    with location.using(storage):  # as the runner does around a step
        _remove_tree_lists_one_directory_at_a_time(root, where, monkeypatch)


def _remove_tree_lists_one_directory_at_a_time(root, where, monkeypatch):
    from executor.engine.prefix import location

    fs, base = location.url_to_fs(root)
    files = {f"{base}/{stage}/{p:05d}/{k:06d}.arrow": b"x" for stage in ("hash", "reduce") for p in range(6)
             for k in range(5)}
    files.update({f"{base}/hash/done/{k:06d}.json": b"{}" for k in range(5)})
    fs.pipe(files)
    listed: list[int] = []
    ls = fs.ls

    def counting_ls(path, detail=True, **kwargs):
        found = ls(path, detail=detail, **kwargs)
        listed.append(len(found))
        return found

    assert location.url_to_fs(root)[0] is fs  # fsspec's instance cache: remove_tree gets the patched one
    monkeypatch.setattr(fs, "ls", counting_ls)
    monkeypatch.setattr(fs, "find", lambda *a, **k: pytest.fail("the whole tree was listed"))
    remove_tree(root)
    assert not fs.exists(base)
    if where == "s3":  # one listing per directory (the largest: hash/ with 6 partitions and done/)
        assert listed and max(listed) <= 7 and len(listed) == 1 + 2 + 2 * 6 + 1, listed


def test_a_column_too_large_for_arrow_names_the_settings_to_lower():
    from steps.dedup.shuffle import _offsets

    assert _offsets([2**31 - 2, 1]).tolist() == [0, 2**31 - 2, 2**31 - 1]
    with pytest.raises(ValueError, match=r"2147483648 items or bytes in one column.*lower the step's shard_bytes"):
        _offsets([2**31 - 1, 1])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(text, max_size=5), min_size=1, max_size=4), st.integers(0, 2**32 - 1))
def test_strings_taken_with_numpy_are_the_rows_asked_for(chunks, seed):
    """take_strings over a chunked column of sliced chunks, in any order and with repeats; no
    pyarrow.compute (test_dedup_never_imports_pandas checks the import)."""
    arrays = [pa.array(["pad"] + chunk + ["pad"], pa.string()).slice(1, len(chunk)) for chunk in chunks]
    values = [v for chunk in chunks for v in chunk]
    rows = np.random.default_rng(seed).integers(0, max(1, len(values)), size=len(values) * 2 if values else 0)
    taken = take_strings(pa.chunked_array(arrays, pa.string()), rows)
    assert taken.to_pylist() == [values[i] for i in rows.tolist()]
    assert take_strings(arrays[0], np.arange(len(arrays[0]))).to_pylist() == arrays[0].to_pylist()
    assert take_strings(pa.array([], pa.string()), np.zeros(0, np.int64)).to_pylist() == []
