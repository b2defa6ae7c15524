"""Fixtures for the data-step tests: synthetic corpora written as shards, a flaky HTTP server, the S3 emulator."""

from __future__ import annotations

import glob
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from steps.data.synthetic import SyntheticCorpus, generate_corpus
from steps.documents import open_binary_lines, read_documents

try:  # the same module object tests/store uses, so the session shares one emulator
    from emulators import s3_emulator  # noqa: F401  (session fixture, started on first use)
except ImportError:
    from tests.emulators import s3_emulator  # noqa: F401


@pytest.fixture(scope="session")
def dedup_corpus() -> SyntheticCorpus:
    """~1,200 documents: 60 exact copies, 60 near copies, 8 boilerplate sites x 10 pages."""
    return generate_corpus(seed=7, num_originals=1000, mean_words=200, exact_fraction=0.06,
                           near_fraction=0.06, boilerplate_sites=8, pages_per_site=10)


@pytest.fixture(scope="session")
def dedup_corpus_dirs(dedup_corpus, tmp_path_factory) -> dict[int, str]:
    """The dedup corpus written as 1 shard and as 4 shards (same global order)."""
    root = tmp_path_factory.mktemp("dedup-corpus")
    dirs = {}
    for shards in (1, 4):
        dirs[shards] = str(root / f"shards-{shards}")
        dedup_corpus.write(dirs[shards], num_shards=shards)
    return dirs


@pytest.fixture(scope="session")
def small_corpus() -> SyntheticCorpus:
    """~150 short documents (with a few unicode texts added) for tokenize tests."""
    corpus = generate_corpus(seed=3, num_originals=150, mean_words=80, boilerplate_sites=1, pages_per_site=3)
    corpus.docs.append({"id": "unicode-1",
                        "text": "Ünïcödé — 日本語のテキスト, emoji 🎭 and tabs\tand\nnewlines."})
    corpus.docs.append({"id": "unicode-2", "text": "  leading spaces, trailing spaces  "})
    return corpus


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """(root, token cache, eval results) of a tiny model trained 40 steps: test_eval.py and
    test_lm_harness.py read the same model (test_batch_documents.py has a `trained` of its own)."""
    from tests.steps.test_eval import train_and_evaluate  # imports jax after test_eval sets XLA_FLAGS

    return train_and_evaluate(tmp_path_factory.mktemp("eval"))


def _read_attributes(output_path: str) -> dict[str, dict]:
    """All attribute lines of a dedup output, by document id."""
    found = {}
    for path in sorted(glob.glob(f"{output_path}/attributes/*.jsonl.zst")):
        with open_binary_lines(path) as f:
            for line in f:
                attribute = json.loads(line)
                found[attribute["id"]] = attribute
    return found


def _kept_ids(output_path: str) -> list[str]:
    """Ids of the kept documents of a dedup output, in output order."""
    return [d["id"] for p in sorted(glob.glob(f"{output_path}/docs/*.jsonl.zst")) for d in read_documents(p)]


@pytest.fixture(scope="session")
def read_attributes():
    return _read_attributes


@pytest.fixture(scope="session")
def kept_ids():
    return _kept_ids


@dataclass
class FlakyServer:
    """Serves `files` on 127.0.0.1 with an ETag (unless `validators` is False) and byte ranges
    (`Range: bytes=N-`, `If-Range`; unless `honour_ranges` is False: then every answer is the whole
    file, 200). `failures[path]` lists what the next requests get instead of their body: "500" (an
    error status) or "truncate" (half of the body, whole or ranged, then the connection closes).
    `requests` records the path of every GET, `ranges` its (path, Range, If-Range) headers."""

    url: str
    files: dict[str, bytes] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    ranges: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    honour_ranges: bool = True
    validators: bool = True

    def etag(self, path: str) -> str:
        return f'"{hashlib.sha256(self.files[path]).hexdigest()[:16]}"'


@pytest.fixture
def flaky_server():
    state = FlakyServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep test output quiet
            pass

        def do_GET(self):  # noqa: N802 - http.server's naming
            path = self.path.split("?", 1)[0]
            state.requests.append(path)
            state.ranges.append((path, self.headers.get("Range"), self.headers.get("If-Range")))
            body = state.files.get(path)
            if body is None:
                self.send_error(404, "Not Found")
                return
            plan = state.failures.get(path) or []
            failure = plan.pop(0) if plan else None
            if failure == "500":
                self.send_error(500, "Injected failure")
                return
            etag = state.etag(path) if state.validators else None
            requested = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
            if_range = self.headers.get("If-Range")
            start = 0
            if requested and state.honour_ranges and if_range in (None, etag):
                start = int(requested[1])
                if start >= len(body):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(body)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            payload = body[start:]
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Content-Type", "application/octet-stream")
            if etag is not None:
                self.send_header("ETag", etag)
            self.end_headers()
            if failure == "truncate":
                self.wfile.write(payload[: len(payload) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(payload)

        def do_HEAD(self):  # noqa: N802
            body = state.files.get(self.path.split("?", 1)[0])
            if body is None:
                self.send_error(404, "Not Found")
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def write_jsonl(tmp_path):
    """Write raw lines (bytes or str) as a .jsonl file in a fresh directory; returns the directory."""
    def write(lines, name="part-0.jsonl") -> str:
        directory = tmp_path / "input"
        directory.mkdir(exist_ok=True)
        payload = b"".join((l if isinstance(l, bytes) else l.encode("utf-8")) + b"\n" for l in lines)
        (directory / name).write_bytes(payload)
        return str(directory)
    return write

