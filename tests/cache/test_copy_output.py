"""The copy a worker makes for `copy` (executor.engine.transfers.copy_output): a file up to `whole_file_max`
is read once, checked, then written once; a larger one is streamed part by part; the bytes held by
all parallel copies stay under `memory`, whatever the output's or a file's size; every file's size
and checksum must match the manifest (a file longer than its manifest says too)."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from executor.engine.prefix import outputs
from executor.engine.transfers.copy_output import CopyConfig, SourceRejected, copy_output
from tests.emulators import running_s3_server_process

MIB = 1 << 20


def output_of(root: Path, sizes: dict[str, int]) -> tuple[dict, ...]:
    """Files of random bytes under `root`, and their manifest (as a step's record holds it)."""
    for name, size in sizes.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(os.urandom(size))
    return tuple(outputs.manifest(outputs.filesystem(str(root)), str(root)))


def peak_of(config: CopyConfig) -> tuple[dict, int]:
    """copy_output's result and its peak traced Python memory."""
    tracemalloc.start()
    try:
        copied = copy_output(config)
        return copied, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def same_files(a: Path, b: Path) -> bool:
    names = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    return names == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) and all(
        (a / n).read_bytes() == (b / n).read_bytes() for n in names)


def test_memory_stays_under_the_budget_however_many_files_run_at_once(tmp_path):
    """Sixteen 2 MiB files, eight threads, a 2 MiB budget: one file is held at a time (eight at once
    would be 16 MiB), so the copy's peak is about 2 MiB (12 MiB without the budget)."""
    manifest = output_of(tmp_path / "src", {f"part-{i:02d}.bin": 2 * MIB for i in range(16)})
    copied, peak = peak_of(CopyConfig(str(tmp_path / "src"), str(tmp_path / "dst"), manifest,
                                      parallel=8, memory=2 * MIB))
    assert copied["files"] == 16 and copied["bytes"] == 32 * MIB
    assert same_files(tmp_path / "src", tmp_path / "dst")
    assert peak < 5 * MIB, f"peak {peak / MIB:.1f} MiB"


def test_a_file_larger_than_whole_file_max_is_streamed_with_memory_flat_in_its_size(tmp_path):
    """A 24 MiB file with 1 MiB parts: copied byte for byte, never held whole."""
    manifest = output_of(tmp_path / "src", {"big.bin": 24 * MIB, "small/a.bin": 1000})
    copied, peak = peak_of(CopyConfig(str(tmp_path / "src"), str(tmp_path / "dst"), manifest,
                                      whole_file_max=MIB, part=MIB))
    assert copied["bytes"] == 24 * MIB + 1000
    assert same_files(tmp_path / "src", tmp_path / "dst")
    assert peak < 5 * MIB, f"peak {peak / MIB:.1f} MiB"


@pytest.mark.parametrize("whole_file_max", [64 * MIB, MIB], ids=["read-whole", "streamed"])
def test_a_changed_byte_in_the_last_part_rejects_the_source_and_leaves_nothing(tmp_path, whole_file_max):
    manifest = output_of(tmp_path / "src", {"big.bin": 3 * MIB + 5, "a.txt": 10})
    big = tmp_path / "src" / "big.bin"
    data = bytearray(big.read_bytes())
    data[-1] ^= 1
    big.write_bytes(bytes(data))
    with pytest.raises(SourceRejected, match="big.bin: sha256 differs from the manifest"):
        copy_output(CopyConfig(str(tmp_path / "src"), str(tmp_path / "dst"), manifest,
                               whole_file_max=whole_file_max, part=MIB))
    assert not [p for p in (tmp_path / "dst").rglob("*") if p.is_file()]


@pytest.mark.parametrize("whole_file_max", [64 * MIB, MIB], ids=["read-whole", "streamed"])
def test_a_file_longer_than_its_manifest_is_rejected(tmp_path, whole_file_max):
    """The manifest's bytes are all there and match, but the file goes on: not the output the record
    describes (the last read reaches one byte past the manifest's size to see it)."""
    manifest = output_of(tmp_path / "src", {"big.bin": 2 * MIB})
    with open(tmp_path / "src" / "big.bin", "ab") as f:
        f.write(b"x")
    with pytest.raises(SourceRejected, match=f"big.bin: {2 * MIB + 1} bytes, the manifest says {2 * MIB}"):
        copy_output(CopyConfig(str(tmp_path / "src"), str(tmp_path / "dst"), manifest,
                               whole_file_max=whole_file_max, part=MIB))


@pytest.mark.parametrize("whole_file_max", [64 * MIB, MIB], ids=["read-whole", "streamed"])
def test_a_shorter_file_is_rejected(tmp_path, whole_file_max):
    manifest = output_of(tmp_path / "src", {"big.bin": 2 * MIB})
    with open(tmp_path / "src" / "big.bin", "r+b") as f:
        f.truncate(MIB + 7)
    with pytest.raises(SourceRejected, match=f"big.bin: {MIB + 7} bytes, the manifest says {2 * MIB}"):
        copy_output(CopyConfig(str(tmp_path / "src"), str(tmp_path / "dst"), manifest,
                               whole_file_max=whole_file_max, part=MIB))


def test_an_empty_file_is_copied_and_one_that_grew_is_rejected(tmp_path):
    manifest = output_of(tmp_path / "src", {"empty": 0, "a.txt": 3})
    assert copy_output(CopyConfig(str(tmp_path / "src"), str(tmp_path / "dst"), manifest))["files"] == 2
    assert same_files(tmp_path / "src", tmp_path / "dst")
    (tmp_path / "src" / "empty").write_bytes(b"now 12 bytes")
    with pytest.raises(SourceRejected, match="empty: 12 bytes, the manifest says 0"):
        copy_output(CopyConfig(str(tmp_path / "src"), str(tmp_path / "again"), manifest))


def test_between_two_s3_endpoints_a_large_file_streams_as_a_multipart_upload_checked_by_etag():
    """S3 (two moto servers, keys of their own): a 12 MiB object in 5 MiB parts (S3's smallest),
    checked against the source's ETag (an MD5), beside a small and an empty object; a changed object
    rejected."""
    from executor.core.locations import Storage
    from executor.engine.prefix import location

    with running_s3_server_process("srcbk") as first, running_s3_server_process("dstbk") as second:
        storage = Storage({"s3://srcbk": first.storage_options, "s3://dstbk": second.storage_options})
        src_fs, _ = location.url_to_fs("s3://srcbk/out", storage)
        src_fs.pipe_file("srcbk/out/big.bin", os.urandom(12 * MIB))
        src_fs.pipe_file("srcbk/out/small.txt", b"small")
        src_fs.pipe_file("srcbk/out/empty", b"")
        manifest = tuple(outputs.manifest(src_fs, "srcbk/out"))
        assert {e["checksum"]["algorithm"] for e in manifest} == {"s3-etag-md5"}
        config = CopyConfig("s3://srcbk/out", "s3://dstbk/out", manifest, whole_file_max=5 * MIB, part=5 * MIB)
        with location.using(storage):
            assert copy_output(config)["bytes"] == 12 * MIB + 5
            dst_fs, _ = location.url_to_fs("s3://dstbk/out", storage)
            assert dst_fs.cat_file("dstbk/out/big.bin") == src_fs.cat_file("srcbk/out/big.bin")
            assert dst_fs.cat_file("dstbk/out/empty") == b"" and dst_fs.cat_file("dstbk/out/small.txt") == b"small"
            src_fs.pipe_file("srcbk/out/big.bin", os.urandom(12 * MIB))
            with pytest.raises(SourceRejected, match="big.bin: s3-etag-md5 differs from the manifest"):
                copy_output(CopyConfig("s3://srcbk/out", "s3://dstbk/again", manifest,
                                       whole_file_max=5 * MIB, part=5 * MIB))
            assert not dst_fs.find("dstbk/again")
