"""`stepgraph serve` over plain HTTP: the token rules, traversal attempts, the security headers,
a browsing session that leaves the prefix's bytes as they were, storage options used and never
shown (S3 and GCS emulators), --token-file, --port 0, the warning beyond loopback, a prompt stop."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import pytest

from executor.__main__ import build_parser
from tests.serve import server
from tests.serve.conftest import step_ids


def every_page(served: server.Served, hello: Path) -> dict[str, tuple[int, dict, bytes]]:
    """Every page a person can reach from the overview (plus each log and the live streams)."""
    paths = ["/", "/runs", "/?state=FAILED", "/?q=hello&page=2"]
    paths += [f"/step/{quote(i)}" for i in sorted(step_ids(hello))]
    runs = [p.stem for p in (hello / "runs").glob("*.json")]
    paths += [f"/run/{r}" for r in runs] + [f"/run/{r}/report" for r in runs]
    paths += [f"/log?step={quote(str(p.parents[2].relative_to(hello)))}&attempt=1"
              for p in hello.glob("*/*/.executor/logs/attempt-1.log")]
    paths += ["/static/live.js", "/static/style.css"]
    return {path: served.get(path) for path in paths}


def test_without_the_token_every_request_is_refused(served, hello):
    some_step = sorted(step_ids(hello))[0]
    for path in ["/", "/runs", f"/step/{some_step}", "/events?view=overview", "/static/live.js",
                 f"/log?step={some_step}&attempt=1"]:
        assert served.get(path, cookie=None)[0] == 401, path
        assert served.get(path, cookie=f"stepgraph-token-{served.port}=wrong-{served.token}")[0] == 401, path
        assert served.get(path, cookie=f"stepgraph-token-{served.port + 1}={served.token}")[0] == 401, path
    assert served.get("/?token=" + served.token[:-1], cookie=None)[0] == 401
    status, headers, _ = served.get("/runs?token=" + served.token, cookie=None)
    assert status == 303 and headers["location"] == "/runs"  # the token leaves the address bar
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"stepgraph-token-{served.port}={served.token};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert served.get("/runs")[0] == 200


def test_traversal_attempts_and_unlisted_names_are_404(served, hello):
    some_step = sorted(step_ids(hello))[0]
    secret = hello.parent / "outside.txt"
    secret.write_text("not for the web")
    for path in ["/step/../outside.txt", "/step/%2e%2e/outside.txt", "/step/..%2Foutside.txt",
                 f"/step/{some_step}/../../outside.txt", "/step//etc/passwd", "/step/hello",
                 f"/step/{some_step}/.executor/status.json", "/run/../outside", "/run/..%2F..%2Foutside/report",
                 "/log?step=../outside.txt&attempt=1", f"/log?step={some_step}&attempt=../../../outside",
                 f"/log?step={some_step}&attempt=2", "/static/../source.py", "/static/%2e%2e/source.py",
                 "/static/..%2Fsource.py", "/events?view=../../x"]:
        status, _, body = served.get(path)
        assert status == 404, (path, status)
        assert b"not for the web" not in body


def test_every_response_carries_a_policy_without_inline_script(served, hello):
    pages = every_page(served, hello)
    assert all(status == 200 for status, _, _ in pages.values()), {p: s for p, (s, _, _) in pages.items()}
    for path, (_, headers, body) in pages.items():
        assert headers["x-content-type-options"] == "nosniff" and headers["referrer-policy"] == "no-referrer"
        policy = headers["content-security-policy"]
        if path.endswith("/report"):  # the run's stored report: no script at all
            assert "script-src" not in policy and "default-src 'none'" in policy
            continue
        assert "script-src 'self'" in policy and "unsafe" not in policy and "default-src 'none'" in policy
        if headers["content-type"].startswith("text/html"):
            scripts = re.findall(rb"<script[^>]*>", body)
            assert scripts == [b'<script src="/static/live.js" defer>'], (path, scripts)
    status, headers, _ = served.get("/nope")
    assert status == 404 and "script-src 'self'" in headers["content-security-policy"]


def test_browsing_every_page_writes_nothing_under_the_prefix(served, hello):
    before = server.prefix_bytes(hello)
    every_page(served, hello)
    step = sorted(step_ids(hello))[0]
    with ThreadPoolExecutor(2) as pool:  # both streams open at once, each for 3 s (refreshes every 2 s)
        step_stream = pool.submit(server.events, served, f"view=step&step={quote(step)}&since=0", seconds=3)
        overview = pool.submit(server.events, served, "view=overview&since=0", seconds=3)
        received_step, received_overview = step_stream.result(), overview.result()
    assert [name for name, _ in received_step][:1] == ["detail"]  # a page that subscribed late catches up
    assert {d["id"] for name, d in received_overview if name == "step"} == step_ids(hello)
    assert server.prefix_bytes(hello) == before


@pytest.mark.parametrize("backend", ["s3", "gcs"])
def test_storage_options_are_used_and_never_shown(backend, request, tmp_path):
    emulator = request.getfixturevalue(f"{backend}_emulator")
    prefix = emulator.fresh_prefix("serve")
    if backend == "s3":
        secret = "s3cr3t-" + uuid.uuid4().hex  # moto takes any credentials; this one appears nowhere else
        options = json.dumps({**emulator.storage_options, "secret": secret})
    else:  # the emulator takes no credentials: its endpoint is the option that must not show
        secret = emulator.endpoint_url
        options = json.dumps(emulator.storage_options)
    env = server.environment(EXECUTOR_STORAGE_OPTIONS=options)
    done = server.run_experiment(server.EXPERIMENTS / "hello.py", prefix, "--runner", "inline", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    running = server.start(prefix, "--storage-options", options)  # the flag; the variable is not set
    try:
        status, _, body = running.get("/")
        assert status == 200 and body.count(b'class="step"') == 5
        pages = [running.get(path)[2] for path in ["/runs"] + re.findall(r'href="(/step/[^"]+)"', body.decode())]
        assert len(pages) == 6 and all(b"hello" in page for page in pages)
        for page in [body, *pages]:
            assert secret.encode() not in page and emulator.endpoint_url.encode() not in page
        assert not any(secret in line or emulator.endpoint_url in line for line in running.lines)
    finally:
        running.stop()


def test_token_file_port_zero_and_the_warning_beyond_loopback(hello, served, tmp_path):
    short = tmp_path / "short"
    short.write_text("abc\n")
    done = subprocess.run([sys.executable, "-m", "executor", "serve", "--prefix", str(hello), "--token-file",
                           str(short)], cwd=server.REPO, env=server.environment(), capture_output=True, text=True)
    assert done.returncode == 2 and "at least 16" in done.stderr
    token = tmp_path / "token"
    token.write_text("a-stable-token-for-the-team-0123\n")
    running = server.start(str(hello), "--token-file", str(token), "--host", "0.0.0.0")
    try:
        assert running.token == "a-stable-token-for-the-team-0123" and running.port > 0
        assert any(line.startswith("warning: serving on 0.0.0.0, beyond this machine's loopback")
                   for line in running.lines)
        assert running.get("/", cookie=None)[0] == 401 and running.get("/")[0] == 200
    finally:
        running.stop()
    local = served  # the module's server, started as `server.start(str(hello))`: loopback, no token file
    assert not any(line.startswith("warning") for line in local.lines)
    assert local.token != "a-stable-token-for-the-team-0123" and len(local.token) >= 24


def test_the_default_port_is_clear_of_rays_dashboard():
    args = build_parser().parse_args(["serve"])
    assert args.port == 8270 and args.port != 8265 and args.host == "127.0.0.1" and args.interval == 2.0


def test_sigterm_with_a_page_open_stops_the_server_at_once(hello):
    import threading
    import time

    running = server.start(str(hello))
    stream = threading.Thread(target=server.events, args=(running, "view=overview&since=0", 30), daemon=True)
    stream.start()
    time.sleep(1.0)  # the stream is open
    began = time.monotonic()
    running.process.terminate()
    assert running.process.wait(timeout=20) == 0
    assert time.monotonic() - began < 5  # not aiohttp's 60 s wait for open streams
