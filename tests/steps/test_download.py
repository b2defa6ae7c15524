"""Download: local globs, manifest + skip on re-run, retries through a flaky HTTP server, checksums, 404,
HTTP downloads resumed with Range requests (across retries and across runs)."""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import replace

import pytest

from steps.download import (RESUMABLE_SUFFIX, ChecksumMismatch, DownloadConfig, DownloadError, SourceNotFound,
                            download)

FAST = dict(backoff_initial_s=0.01, backoff_max_s=0.05)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_local_glob_copy_writes_manifest_and_skips_complete_files(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.jsonl").write_bytes(b'{"id": "a", "text": "x"}\n')
    (src / "sub" / "b.jsonl").write_bytes(b'{"id": "b", "text": "y"}\n')
    out = tmp_path / "out"
    config = DownloadConfig(sources=[f"file://{src}/**/*.jsonl"], output_path=str(out))
    first = download(config)
    assert first["files"] == 2 and first["downloaded"] == 2
    assert (out / "docs" / "a.jsonl").read_bytes() == (src / "a.jsonl").read_bytes()
    assert (out / "docs" / "sub" / "b.jsonl").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["schema"] == 1
    assert {f["name"]: f["sha256"] for f in manifest["files"]} == {
        "a.jsonl": sha((src / "a.jsonl").read_bytes()), "sub/b.jsonl": sha((src / "sub" / "b.jsonl").read_bytes())}
    mtime = os.stat(out / "docs" / "a.jsonl").st_mtime_ns
    second = download(config)
    assert second["skipped_complete"] == 2 and second["downloaded"] == 0
    assert os.stat(out / "docs" / "a.jsonl").st_mtime_ns == mtime
    (out / "docs" / "a.jsonl").write_bytes(b"damaged")   # a damaged copy is fetched again
    assert download(config)["downloaded"] == 1
    assert (out / "docs" / "a.jsonl").read_bytes() == (src / "a.jsonl").read_bytes()


def test_retries_through_a_flaky_http_server(flaky_server, tmp_path):
    body = b'{"id": "1", "text": "hello"}\n' * 5000
    flaky_server.files["/data/part.jsonl"] = body
    flaky_server.failures["/data/part.jsonl"] = ["500", "truncate", "500"]
    result = download(DownloadConfig(sources=[f"{flaky_server.url}/data/part.jsonl"], output_path=str(tmp_path),
                                     expected_sha256={"part.jsonl": sha(body)}, **FAST))
    assert (tmp_path / "docs" / "part.jsonl").read_bytes() == body
    assert result["retries"] == 3
    assert flaky_server.requests.count("/data/part.jsonl") == 4
    assert not [p for p in (tmp_path / "docs").iterdir() if p.name != "part.jsonl"]  # no partial files left


def test_gives_up_after_max_attempts_naming_the_source(flaky_server, tmp_path):
    flaky_server.files["/x.jsonl"] = b"{}\n"
    flaky_server.failures["/x.jsonl"] = ["500"] * 10
    with pytest.raises(DownloadError, match=r"/x.jsonl.*attempt 3 of 3"):
        download(DownloadConfig(sources=[f"{flaky_server.url}/x.jsonl"], output_path=str(tmp_path),
                                max_attempts=3, **FAST))
    assert not (tmp_path / "docs" / "x.jsonl").exists()


def test_checksum_mismatch_rejects_the_file(flaky_server, tmp_path):
    flaky_server.files["/good.jsonl"] = b"good\n"
    flaky_server.files["/corrupt.jsonl"] = b"corrupted bytes\n"
    with pytest.raises(ChecksumMismatch) as error:
        download(DownloadConfig(
            sources=[f"{flaky_server.url}/good.jsonl", f"{flaky_server.url}/corrupt.jsonl"],
            output_path=str(tmp_path), expected_sha256={"corrupt.jsonl": sha(b"original bytes\n")}, **FAST))
    assert "corrupt.jsonl" in str(error.value) and sha(b"original bytes\n") in str(error.value)
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == ["good.jsonl"]  # nothing else, no temp
    assert flaky_server.requests.count("/corrupt.jsonl") == 1   # a mismatch is not retried
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [f["name"] for f in manifest["files"]] == ["good.jsonl"]


def test_404_is_a_clear_error_without_retries(flaky_server, tmp_path):
    with pytest.raises(SourceNotFound, match=r"missing.jsonl' was not found \(HTTP 404"):
        download(DownloadConfig(sources=[f"{flaky_server.url}/missing.jsonl"], output_path=str(tmp_path), **FAST))
    assert flaky_server.requests == ["/missing.jsonl"]


def test_config_errors_name_the_value(tmp_path):
    with pytest.raises(SourceNotFound, match="does not exist"):
        download(DownloadConfig(sources=[str(tmp_path / "nope.jsonl")], output_path=str(tmp_path / "o")))
    (tmp_path / "a.jsonl").write_text("{}\n")
    with pytest.raises(ValueError, match="expected_sha256 names"):
        download(DownloadConfig(sources=[str(tmp_path / "a.jsonl")], output_path=str(tmp_path / "o"),
                                expected_sha256={"b.jsonl": "00"}))
    with pytest.raises(ValueError, match="non-empty list"):
        DownloadConfig(sources="a.jsonl", output_path="o")  # type: ignore[arg-type]


def test_relative_sources_are_read_from_source_root_which_is_not_hashed(tmp_path, monkeypatch):
    """Committed data named by a relative path: the same id from any checkout, runnable from any cwd."""
    from executor import ExecutorStep, this_output_path
    from executor.core.graph import build_graph

    checkout = tmp_path / "checkout"
    (checkout / "data").mkdir(parents=True)
    (checkout / "data" / "a.jsonl").write_bytes(b'{"id": "a", "text": "x"}\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    def config(root, expected_key):
        return DownloadConfig(sources=["data/a.jsonl"], output_path=str(tmp_path / "out"), source_root=root,
                              expected_sha256={expected_key: sha(b'{"id": "a", "text": "x"}\n')})

    with pytest.raises(SourceNotFound, match="data/a.jsonl"):  # without it: relative to the cwd
        download(config(None, "a.jsonl"))
    assert download(config(str(checkout), "data/a.jsonl"))["downloaded"] == 1  # checksum keyed by the source
    assert (tmp_path / "out" / "docs" / "a.jsonl").read_bytes() == (checkout / "data" / "a.jsonl").read_bytes()

    ids = {build_graph([ExecutorStep("raw", download, replace(config(root, "a.jsonl"), output_path=this_output_path()))])
           .nodes.popitem()[1].step_id for root in (str(checkout), "/somewhere/else", None)}
    assert len(ids) == 1


BODY = random.Random(0).randbytes(200_000)


def serve(flaky_server, body=BODY, path="/big/part.bin") -> str:
    flaky_server.files[path] = body
    return f"{flaky_server.url}{path}"


def manifest_sha(output) -> dict[str, str]:
    return {f["name"]: f["sha256"] for f in json.loads((output / "manifest.json").read_text())["files"]}


def test_a_truncated_attempt_is_resumed_with_a_range_request(flaky_server, tmp_path):
    url = serve(flaky_server)
    flaky_server.failures["/big/part.bin"] = ["truncate"]
    result = download(DownloadConfig(sources=[url], output_path=str(tmp_path), **FAST))
    half = len(BODY) // 2
    assert flaky_server.ranges == [("/big/part.bin", None, None),
                                   ("/big/part.bin", f"bytes={half}-", flaky_server.etag("/big/part.bin"))]
    assert (tmp_path / "docs" / "part.bin").read_bytes() == BODY
    assert manifest_sha(tmp_path) == {"part.bin": sha(BODY)}
    assert result["resumed_bytes"] == half and result["retries"] == 1
    assert [p.name for p in (tmp_path / "docs").iterdir()] == ["part.bin"]  # no kept bytes, no sidecar


def test_a_server_that_ignores_ranges_starts_the_file_over(flaky_server, tmp_path):
    url = serve(flaky_server)
    flaky_server.failures["/big/part.bin"] = ["truncate"]
    flaky_server.honour_ranges = False
    result = download(DownloadConfig(sources=[url], output_path=str(tmp_path),
                                     expected_sha256={"part.bin": sha(BODY)}, **FAST))
    assert flaky_server.ranges[-1][1] == f"bytes={len(BODY) // 2}-"  # asked for the rest, got the whole file
    assert (tmp_path / "docs" / "part.bin").read_bytes() == BODY
    assert result["resumed_bytes"] == 0 and manifest_sha(tmp_path) == {"part.bin": sha(BODY)}


def fail_leaving_kept_bytes(flaky_server, url, output) -> None:
    """A run whose only attempt is cut midway: it fails and keeps half the file, as a killed run would."""
    flaky_server.failures["/big/part.bin"] = ["truncate"]
    with pytest.raises(DownloadError, match=r"100000 bytes kept in part.bin.resumable, a re-run resumes"):
        download(DownloadConfig(sources=[url], output_path=str(output), max_attempts=1, **FAST))
    assert (output / "docs" / f"part.bin{RESUMABLE_SUFFIX}").stat().st_size == len(BODY) // 2
    assert not (output / "docs" / "part.bin").exists()


def test_a_rerun_resumes_the_bytes_a_failed_run_kept(flaky_server, tmp_path):
    url = serve(flaky_server)
    fail_leaving_kept_bytes(flaky_server, url, tmp_path)
    (tmp_path / "docs" / "part.bin.partial-999-deadbeef").write_bytes(b"stale")  # a killed run's temporary
    flaky_server.ranges.clear()
    result = download(DownloadConfig(sources=[url], output_path=str(tmp_path), **FAST))
    assert flaky_server.ranges == [("/big/part.bin", f"bytes={len(BODY) // 2}-", flaky_server.etag("/big/part.bin"))]
    assert result["resumed_bytes"] == len(BODY) // 2 and result["retries"] == 0
    assert (tmp_path / "docs" / "part.bin").read_bytes() == BODY
    assert manifest_sha(tmp_path) == {"part.bin": sha(BODY)}
    assert [p.name for p in (tmp_path / "docs").iterdir()] == ["part.bin"]


@pytest.mark.parametrize("change", ["etag", "size", "shrunk"])
def test_kept_bytes_of_a_changed_source_are_dropped(flaky_server, tmp_path, change):
    """etag: If-Range sees the change (200); size: no validators, the 206's total differs; shrunk:
    no validators, the source is now shorter than the kept bytes (416)."""
    url = serve(flaky_server)
    flaky_server.validators = change == "etag"
    fail_leaving_kept_bytes(flaky_server, url, tmp_path)
    old_etag = flaky_server.etag("/big/part.bin") if change == "etag" else None
    new = random.Random(1).randbytes(60_000 if change == "shrunk" else 150_000)
    serve(flaky_server, new)
    flaky_server.ranges.clear()
    result = download(DownloadConfig(sources=[url], output_path=str(tmp_path), **FAST))
    assert (tmp_path / "docs" / "part.bin").read_bytes() == new
    assert result["resumed_bytes"] == 0 and result["retries"] == 0
    assert manifest_sha(tmp_path) == {"part.bin": sha(new)}
    assert flaky_server.ranges[0] == ("/big/part.bin", f"bytes={len(BODY) // 2}-", old_etag)
    assert [r[1] for r in flaky_server.ranges[1:]] == ([] if change == "etag" else [None])
    assert [p.name for p in (tmp_path / "docs").iterdir()] == ["part.bin"]


def test_an_s3_glob_is_copied_with_secret_storage_options_and_skipped_when_complete(s3_emulator, tmp_path):
    """An object-store source (the S3 emulator) through the same code path as any fsspec URL."""
    from executor.engine.prefix import outputs
    prefix = s3_emulator.fresh_prefix("download-src")
    options = dict(s3_emulator.storage_options)
    fs = outputs.filesystem(prefix, options)
    files = {"shards/a.jsonl": b'{"id": "a", "text": "x"}\n', "shards/deep/b.jsonl": b'{"id": "b", "text": "y"}\n'}
    for name, data in files.items():
        fs.pipe_file(f"{prefix}/{name}", data)
    with pytest.raises(ValueError, match=r"is not a valid glob .*'\*\*' can only be an entire path component"):
        download(DownloadConfig(sources=[f"{prefix}/shards/**.jsonl"], output_path=str(tmp_path / "bad"),
                                storage_options=options))
    config = DownloadConfig(sources=[f"{prefix}/shards/**/*.jsonl"], output_path=str(tmp_path / "out"),
                            expected_sha256={"a.jsonl": sha(files["shards/a.jsonl"])}, storage_options=options)
    first = download(config)
    assert first["files"] == 2 and first["downloaded"] == 2
    assert (tmp_path / "out" / "docs" / "a.jsonl").read_bytes() == files["shards/a.jsonl"]
    assert (tmp_path / "out" / "docs" / "deep" / "b.jsonl").read_bytes() == files["shards/deep/b.jsonl"]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert {f["source"] for f in manifest["files"]} == {f"{prefix}/{name}" for name in files}
    assert download(config)["skipped_complete"] == 2


@pytest.mark.parametrize("where", ["local", "bucket"])
def test_a_file_from_a_local_or_bucket_source_that_mismatches_expected_sha256_is_refused(where, request, tmp_path):
    """expected_sha256 holds for every source, not only HTTP: a copied file whose sha256 differs is
    refused (ChecksumMismatch naming it and the expected digest), not kept, not in the manifest;
    the file that matches is kept."""
    files = {"good.jsonl": b'{"id": "g", "text": "good"}\n', "corrupt.jsonl": b'{"id": "c", "text": "corrupted"}\n'}
    options = None
    if where == "local":
        root = tmp_path / "src"
        root.mkdir()
        for name, data in files.items():
            (root / name).write_bytes(data)
        sources = [f"file://{root}/{name}" for name in files]
    else:
        from executor.engine.prefix import outputs
        s3_emulator = request.getfixturevalue("s3_emulator")
        prefix, options = s3_emulator.fresh_prefix("download-sha"), dict(s3_emulator.storage_options)
        fs = outputs.filesystem(prefix, options)
        for name, data in files.items():
            fs.pipe_file(f"{prefix}/{name}", data)
        sources = [f"{prefix}/{name}" for name in files]
    expected = sha(b'{"id": "c", "text": "original"}\n')
    out = tmp_path / "out"
    with pytest.raises(ChecksumMismatch) as error:
        download(DownloadConfig(sources=sources, output_path=str(out), storage_options=options,
                                expected_sha256={"corrupt.jsonl": expected, "good.jsonl": sha(files["good.jsonl"])},
                                **FAST))
    assert "corrupt.jsonl" in str(error.value) and expected in str(error.value), error.value
    assert sorted(p.name for p in (out / "docs").iterdir()) == ["good.jsonl"]  # nothing else, no temp
    assert [f["name"] for f in json.loads((out / "manifest.json").read_text())["files"]] == ["good.jsonl"]
