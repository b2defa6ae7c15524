"""How the cloud stores classify failures: retryable (TransientStoreError) or not (StoreError)."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest

from tests.emulators import S3_FAKE_CREDENTIALS, S3_REGION, free_port
from executor.engine.store import StoreError, TransientStoreError, open_store
from executor.engine.store.gcs import GCSStore
from executor.engine.store.local import LocalStore
from executor.engine.store.memory import MemoryStore
from executor.engine.store.s3 import S3Store

REPO = Path(__file__).resolve().parents[2]


class ScriptedServer:
    """A loopback HTTP server whose answer to every request is set by the test."""

    def __init__(self):
        self.answer = lambda path: (200, b"")
        self.paths: list[str] = []
        scripted = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                if "100-continue" not in self.headers.get("Expect", ""):  # else the body never comes
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                scripted.paths.append(self.path)
                status, body = scripted.answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def always(self, status: int, body: bytes = b'{"error": {"message": "scripted"}}') -> None:
        self.answer = lambda path: (status, body)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def server():
    scripted = ScriptedServer()
    yield scripted
    scripted.close()


def gcs(url: str) -> GCSStore:
    return GCSStore("gs://bucket/prefix", endpoint_url=url, token="anon", request_timeout_s=5)


def s3(url: str) -> S3Store:
    return S3Store("s3://bucket/prefix", endpoint_url=url, **S3_FAKE_CREDENTIALS,
                   client_kwargs={"region_name": S3_REGION})


CLIENTS = {"gcs": gcs, "s3": s3}


@pytest.mark.parametrize("backend", CLIENTS)
@pytest.mark.parametrize("status", [500, 501, 503, 429, 408])
def test_server_errors_and_throttling_are_transient(server, backend, status):
    server.always(status)
    store = CLIENTS[backend](server.url)
    for call in (lambda: store.read("k"), lambda: store.create_if_absent("k", b"x"),
                 lambda: store.replace_if_generation("k", b"x", "1"),
                 lambda: store.list_generations("", ""), lambda: store.delete("k")):
        with pytest.raises(TransientStoreError, match=str(status)):
            call()


@pytest.mark.parametrize("backend", CLIENTS)
@pytest.mark.parametrize("status", [401, 403])
def test_forbidden_is_permanent_and_names_the_bucket(server, backend, status):
    server.always(status)
    store = CLIENTS[backend](server.url)
    for call in (lambda: store.read("k"), lambda: store.create_if_absent("k", b"x"),
                 lambda: store.replace_if_generation("k", b"x", "1"), lambda: store.delete("k")):
        with pytest.raises(StoreError, match="do not grant access to bucket 'bucket'") as raised:
            call()
        assert not isinstance(raised.value, TransientStoreError)
        if backend == "gcs":  # GCS's JSON error message is quoted as it came
            assert f"HTTP {status} scripted:" in str(raised.value)


@pytest.mark.parametrize("backend", CLIENTS)
@pytest.mark.parametrize("status", [400, 409, 499])
def test_another_client_error_is_permanent_and_quoted_as_it_came(server, backend, status):
    """Any 4xx but the ones with a meaning of their own (401/403, 404, 408, 412, 429). S3's code
    is one sorting after NoSuchBucket, so only an exact match makes "bucket does not exist"."""
    server.always(status, b"<Error><Code>UnexpectedContent</Code><Message>scripted</Message></Error>"
                  if backend == "s3" else b'{"error": {"message": "scripted"}}')
    store = CLIENTS[backend](server.url)
    for call in (lambda: store.read("k"), lambda: store.create_if_absent("k", b"x"),
                 lambda: store.replace_if_generation("k", b"x", "1"), lambda: store.delete("k")):
        with pytest.raises(StoreError, match=f"HTTP {status}") as raised:
            call()
        assert not isinstance(raised.value, TransientStoreError) and "does not exist" not in str(raised.value)


@pytest.mark.parametrize("backend", CLIENTS)
def test_each_call_is_one_request_even_when_it_fails(server, backend):
    """No retries below the store (botocore's and gcsfs's are off): a conditional write retried
    blindly could report a race lost that it won. Retrying is RetryingStore's job."""
    server.always(503)
    store = CLIENTS[backend](server.url)
    for call in (lambda: store.read("k"), lambda: store.create_if_absent("k", b"x")):
        server.paths.clear()
        with pytest.raises(TransientStoreError):
            call()
        assert len(server.paths) == 1, server.paths


@pytest.mark.parametrize("body", [b"", b"<Error><Code>SomethingElse</Code><Message>m</Message></Error>"],
                         ids=["no body", "another code"])
def test_an_s3_412_is_a_race_lost_whatever_its_code(server, body):
    """S3-compatible servers (and proxies before them) answer a failed precondition 412 without
    always saying PreconditionFailed: the status alone means the write did not happen."""
    server.always(412, body)
    store = s3(server.url)
    assert store.create_if_absent("k", b"x") is None
    assert store.replace_if_generation("k", b"x", '"etag"') is None


@pytest.mark.parametrize("requester_pays, project", [("billing-project", "billing-project"), (True, "own-project")])
def test_gcs_requester_pays_bills_the_project_on_every_request(server, requester_pays, project):
    """gcsfs's requester_pays option (True: the filesystem's project; a string: that project) sends
    userProject with each request, as gcsfs does; without it no request names a project."""
    server.answer = lambda path: (200, json.dumps({"items": [], "generation": "5"}).encode())
    for options, expected in (({"requester_pays": requester_pays, "project": "own-project"}, project),
                              ({"project": "own-project"}, None)):
        server.paths.clear()
        store = GCSStore("gs://bucket/prefix", endpoint_url=server.url, token="anon", request_timeout_s=5,
                         **options)
        store.create_if_absent("k", b"x")
        store.replace_if_generation("k", b"x", "5")
        store.list_generations("", "")
        store.delete("k")
        assert len(server.paths) == 4
        named = [dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(p).query)).get("userProject") for p in server.paths]
        assert named == [expected] * 4, options


@pytest.mark.parametrize("backend", CLIENTS)
def test_an_object_not_found_reads_as_absent_and_its_delete_is_done(server, backend):
    """A 404 about the object (not the bucket), with or without an error code in the body."""
    store = CLIENTS[backend](server.url)
    for body in (b"", b'{"error": {"message": "No such object: bucket/prefix/k"}}',
                 b"<Error><Code>NotFound</Code><Message>no such key</Message></Error>"):
        server.always(404, body)
        assert store.read("k") is None
        store.delete("k")


def test_gcs_listing_uses_match_glob_while_the_server_accepts_it(server):
    listing = json.dumps({"items": [{"name": "prefix/a/status.json", "generation": "7"}]}).encode()
    server.always(200, listing)
    server.paths.clear()
    store = gcs(server.url)
    assert store.list_generations("", "status.json") == {"a/status.json": "7"}
    assert store.list_generations("", "status.json") == {"a/status.json": "7"}
    assert ["matchGlob" in p for p in server.paths] == [True, True]


@pytest.mark.parametrize("backend", CLIENTS)
def test_unreachable_endpoint_is_transient(backend):
    store = CLIENTS[backend](f"http://127.0.0.1:{free_port()}")
    with pytest.raises(TransientStoreError, match="k"):
        store.read("k")


def test_a_refused_gcs_connection_names_the_endpoint_to_check():
    """A wrong endpoint_url (an emulator not started, a typo) is refused: the error says which endpoint."""
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TransientStoreError, match=f"check endpoint_url='{url}' if it persists"):
        gcs(url).read("k")


def test_a_refused_s3_connection_names_the_endpoint_to_check():
    """As GCS: the operation, the object and the endpoint_url the store was given."""
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TransientStoreError, match=rf"^S3 read s3://bucket/prefix/k: .* \(retryable; check "
                                                  rf"endpoint_url='{url}' if it persists\)$"):
        s3(url).read("k")


class MuteServer:
    """A loopback port that accepts connections and never answers: it closes each after reading the
    request (`close=True`), or holds it open."""

    def __init__(self, close: bool):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, args=(close,), daemon=True).start()

    def _accept(self, close: bool) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # closed: the test is over
                return
            if close:
                connection.recv(65536)
                connection.close()
            else:
                self.held.append(connection)

    def close(self) -> None:
        self.listener.close()
        for connection in self.held:
            connection.close()


@pytest.fixture
def mute_server(request):
    mute = MuteServer(close=request.param == "closes")
    yield mute
    mute.close()


@pytest.mark.parametrize("mute_server", ["closes"], indirect=True)
@pytest.mark.parametrize("backend", CLIENTS)
def test_a_connection_closed_without_an_answer_is_transient(mute_server, backend):
    """A server (or a proxy) dropping the connection is network trouble: retried, never a raw error."""
    with pytest.raises(TransientStoreError, match=r"^(GCS|S3) read (gs|s3)://bucket/prefix/k: .* "
                                                  r"\(network trouble; retryable\)$"):
        CLIENTS[backend](mute_server.url).read("k")


@pytest.mark.parametrize("mute_server", ["holds"], indirect=True)
def test_a_gcs_request_without_an_answer_is_transient_and_says_how_long_it_waited(mute_server):
    store = GCSStore("gs://bucket/prefix", endpoint_url=mute_server.url, token="anon", request_timeout_s=0.5)
    with pytest.raises(TransientStoreError, match=r"^GCS read gs://bucket/prefix/k: no answer within 0\.5 s "
                                                  r"\(network trouble; retryable\)$"):
        store.read("k")


def test_gcs_read_without_a_generation_header_is_refused(server):
    server.always(200, b"data")
    with pytest.raises(StoreError, match="x-goog-generation"):
        gcs(server.url).read("k")


def test_missing_bucket_is_a_permanent_error_naming_it(gcs_emulator, s3_emulator):
    for emulator in (gcs_emulator, s3_emulator):
        store = open_store(f"{emulator.scheme}://no-such-bucket/p", emulator.storage_options)
        calls = [lambda: store.create_if_absent("k", b"x")]
        if emulator.scheme == "s3":  # fake-gcs-server's 404 does not say it is the bucket: see the next test
            calls += [lambda: store.read("k"), lambda: store.delete("k")]
        for call in calls:
            with pytest.raises(StoreError, match="bucket 'no-such-bucket' does not exist") as raised:  # never "absent", never done
                call()
            assert not isinstance(raised.value, TransientStoreError)


def test_a_gcs_404_about_the_bucket_is_an_error_not_an_absent_object(server):
    """Real GCS says which: "The specified bucket does not exist." (an object's 404 says "No such object")."""
    server.always(404, b'{"error": {"code": 404, "message": "The specified bucket does not exist."}}')
    store = gcs(server.url)
    for call in (lambda: store.read("k"), lambda: store.delete("k")):
        with pytest.raises(StoreError, match="bucket 'bucket' does not exist"):
            call()


@pytest.mark.parametrize("prefix", ["gs://", "gs:///path", "s3://"])
def test_a_prefix_without_a_bucket_is_refused(prefix):
    with pytest.raises(StoreError, match="bucket"):
        open_store(prefix, {})


def test_open_store_picks_the_backend_by_scheme(tmp_path, gcs_emulator, s3_emulator):
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    assert isinstance(open_store("memory://x"), MemoryStore)
    assert isinstance(open_store(gcs_emulator.prefix("p"), gcs_emulator.storage_options), GCSStore)
    assert isinstance(open_store(s3_emulator.prefix("p"), s3_emulator.storage_options), S3Store)
    assert open_store(gcs_emulator.prefix("a/b/"), gcs_emulator.storage_options).root == gcs_emulator.prefix("a/b")


def test_a_gcs_listing_that_fails_otherwise_keeps_match_glob(server):
    """Only a 400 to a matchGlob listing means the server refuses the glob; a throttled or failed
    listing is that listing's error, and the next one still filters server-side."""
    listing = json.dumps({"items": [{"name": "prefix/a/status.json", "generation": "7"}]}).encode()
    store = gcs(server.url)
    for status in (503, 429, 403):
        server.always(status)
        server.paths.clear()
        with pytest.raises(StoreError):
            store.list_generations("", "status.json")
        assert len(server.paths) == 1 and "matchGlob" in server.paths[0], server.paths
    server.always(200, listing)
    server.paths.clear()
    assert store.list_generations("", "status.json") == {"a/status.json": "7"}
    assert ["matchGlob" in p for p in server.paths] == [True]


def test_gcs_listing_falls_back_when_the_server_refuses_match_glob(server):
    listing = json.dumps({"items": [{"name": "prefix/a/status.json", "generation": "7"},
                                    {"name": "prefix/a/x", "generation": "8"}]}).encode()
    refused = (400, b'{"error": {"message": "bad glob"}}')
    server.answer = lambda path: refused if "matchGlob" in path else (200, listing)
    server.paths.clear()
    store = gcs(server.url)
    assert store.list_generations("", "status.json") == {"a/status.json": "7"}
    assert store.list_generations("", "status.json") == {"a/status.json": "7"}
    assert ["matchGlob" in p for p in server.paths] == [True, False, False]


S3_ERROR = "<Error><Code>{code}</Code><Message>scripted</Message></Error>"


@pytest.mark.parametrize("status, code", [(503, "SlowDown"), (500, "InternalError"), (503, "ServiceUnavailable")])
def test_s3_throttling_and_server_error_codes_are_transient_not_absent(server, status, code):
    """S3's own error bodies: a throttled or failed call is retried, never read as an absent object
    (which would make a step run again) nor as a race lost."""
    server.always(status, S3_ERROR.format(code=code).encode())
    store = s3(server.url)
    for call in (lambda: store.read("k"), lambda: store.delete("k"), lambda: store.create_if_absent("k", b"x"),
                 lambda: store.replace_if_generation("k", b"x", '"etag"')):
        with pytest.raises(TransientStoreError, match=code):
            call()


@pytest.mark.parametrize("status", [200, 204])
def test_a_gcs_delete_answered_with_success_is_done(server, status):
    """GCS answers a delete 204 No Content (the JSON API's documented answer); 200 is taken too."""
    server.always(status, b"")
    gcs(server.url).delete("k")


def test_a_long_gcs_error_that_is_not_json_is_quoted_to_200_characters(server):
    server.always(400, b"x" * 300)
    with pytest.raises(StoreError) as raised:
        gcs(server.url).create_if_absent("k", b"x")
    assert "x" * 200 in str(raised.value) and "x" * 201 not in str(raised.value)


def test_listings_ask_for_1000_objects_a_page(server):
    """The most either service gives in one page (S3 MaxKeys, GCS maxResults), as the stores' docs say."""
    server.always(200, b"<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>")
    server.paths.clear()
    assert s3(server.url).list_generations("", "status.json") == {}
    server.always(200, b"{}")
    assert gcs(server.url).list_generations("", "status.json") == {}
    queries = [dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(p).query)) for p in server.paths]
    assert [q.get("max-keys") or q.get("maxResults") for q in queries] == ["1000", "1000"], server.paths


def test_s3_without_credentials_says_how_to_give_them(server, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # nothing may leave loopback
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    store = S3Store("s3://bucket/prefix", endpoint_url=server.url, client_kwargs={"region_name": S3_REGION},
                    skip_instance_cache=True)
    server.paths.clear()
    with pytest.raises(StoreError, match="no credentials: pass key=/secret= in the storage options") as raised:
        store.read("k")
    assert not isinstance(raised.value, TransientStoreError)
    assert server.paths == []  # refused before any request went out


def test_a_local_key_that_is_a_directory_is_a_store_error_naming_it(tmp_path):
    """A status path that is a directory (a damaged prefix) opens, then fails to read: a StoreError
    naming the path, as for any other unreadable key."""
    (tmp_path / "step-1" / "status.json").mkdir(parents=True)
    store = LocalStore(str(tmp_path))
    with pytest.raises(StoreError, match=r"cannot read .*step-1/status.json: Is a directory"):
        store.read("step-1/status.json")
    with pytest.raises(StoreError, match="Is a directory"):
        list(store.read_many(["step-1/status.json"]))


def test_a_local_prefix_that_is_a_file_is_a_store_error_naming_it(tmp_path):
    """A prefix (or a directory under it) that is a regular file: writing, reading many and listing
    fail with a StoreError naming the path, not a bare OSError."""
    (tmp_path / "file").write_text("not a directory")
    store = LocalStore(str(tmp_path / "file"))
    with pytest.raises(StoreError, match=r"cannot lock .*file/step-1/status.json: Not a directory"):
        store.create_if_absent("step-1/status.json", b"x")
    with pytest.raises(StoreError, match=r"cannot read .*file: Not a directory"):
        list(store.read_many(["step-1/status.json"]))
    with pytest.raises(StoreError, match=r"cannot read .*file/step-1/status.json: Not a directory"):
        LocalStore(str(tmp_path)).read("file/step-1/status.json")


def test_an_s3_create_answered_no_such_key_is_an_error_not_a_race_lost(server):
    """NoSuchKey means "nothing to replace" to a conditional replace only; to a create it is a
    server's error (a create lost to nobody would wait forever for a holder)."""
    server.always(404, b"<Error><Code>NoSuchKey</Code><Message>scripted</Message></Error>")
    with pytest.raises(StoreError, match="NoSuchKey"):
        s3(server.url).create_if_absent("k", b"x")
    assert s3(server.url).replace_if_generation("k", b"x", '"etag"') is None


def test_an_s3_region_botocore_refuses_is_a_store_error_naming_it(server):
    store = S3Store("s3://bucket/prefix", endpoint_url=server.url, **S3_FAKE_CREDENTIALS,
                    client_kwargs={"region_name": "not a region!"}, skip_instance_cache=True)
    with pytest.raises(StoreError, match="InvalidRegionError") as raised:
        store.read("k")
    assert "not a region!" in str(raised.value) and not isinstance(raised.value, TransientStoreError)


def test_first_writes_into_a_new_local_directory_at_once_all_succeed(tmp_path):
    """Threads (or processes) whose first write creates the same directory: none fails on finding
    it made by another meanwhile."""
    import itertools

    from tests.cache.at_once import run_at_once

    store = LocalStore(str(tmp_path / "store"))
    for round_ in range(20):
        names = itertools.count()
        run_at_once(8, lambda: store.create_if_absent(f"dir-{round_}/status-{next(names)}.json", b"x"))  # noqa: B023
        assert len(store.list_generations(f"dir-{round_}/", ".json")) == 8


def test_a_local_write_that_fails_leaves_no_temporary_file(tmp_path):
    """The bytes go to a temporary file renamed over the key; a write that fails midway (here: not
    bytes) removes it, so a prefix never fills with .tmp- litter."""
    store = LocalStore(str(tmp_path))
    with pytest.raises(TypeError):
        store.create_if_absent("step-1/status.json", "not bytes")  # type: ignore[arg-type]
    assert sorted(p.name for p in (tmp_path / "step-1").iterdir()) == ["status.json.lock"]
    assert store.read("step-1/status.json") is None


_OUT_OF_DESCRIPTORS = """
import os, resource, sys
from executor.engine.store.base import StoreError
from executor.engine.store.local import LocalStore

store = LocalStore(sys.argv[1])
store.create_if_absent("step-1/status.json", b"x")  # the directory exists from here on
lowest_free = os.open(os.devnull, os.O_RDONLY)
os.close(lowest_free)
resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
try:  # the lock file's open takes the last descriptor: the temporary file's open fails
    store.create_if_absent("step-1/record.json", b"y")
except StoreError as e:
    print(e)
"""


def test_a_local_write_that_cannot_make_its_temporary_file_says_why(tmp_path):
    """A runner out of file descriptors (or any open that fails) gets a StoreError naming the key's
    path and the real reason, not the cleanup's "No such file or directory" about a file never made."""
    done = subprocess.run([sys.executable, "-c", _OUT_OF_DESCRIPTORS, str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == f"cannot write {tmp_path}/step-1/record.json: Too many open files", done.stderr
    assert sorted(p.name for p in (tmp_path / "step-1").iterdir()) == [
        "record.json.lock", "status.json", "status.json.lock"]
