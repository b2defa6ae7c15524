"""`stepgraph serve` as a user starts it: a real subprocess on a free loopback port (`--port 0`),
its URL read from what it prints; and small HTTP helpers that send paths exactly as given."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = REPO / "experiments"


@dataclass
class Served:
    process: subprocess.Popen
    url: str  # as printed: http://127.0.0.1:PORT/?token=...
    lines: list[str] = field(default_factory=list)  # everything it printed (stdout and stderr)

    @property
    def base(self) -> str:
        return self.url.split("/?", 1)[0]

    @property
    def port(self) -> int:
        return int(urlsplit(self.url).port)

    @property
    def token(self) -> str:
        return self.url.split("token=", 1)[1]

    @property
    def cookie(self) -> str:
        return f"stepgraph-token-{self.port}={self.token}"

    def get(self, path: str, cookie: str | None = "", timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
        """GET `path` exactly as written (no normalising of '..'); with the token cookie unless
        `cookie` is None (or another cookie string)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = {} if cookie is None else {"Cookie": cookie or self.cookie}
        try:
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            connection.close()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("EXECUTOR_PREFIX", "EXECUTOR_STORAGE_OPTIONS")}
    env["PYTHONPATH"] = str(REPO)
    return {**env, **extra}


def start(prefix: str, *flags: str, env: dict[str, str] | None = None, timeout_s: float = 60.0) -> Served:
    """Start `python -m executor serve --prefix PREFIX --port 0 FLAGS` and wait for its URL."""
    process = subprocess.Popen([sys.executable, "-m", "executor", "serve", "--prefix", prefix, "--port", "0", *flags],
                               cwd=REPO, env=env or environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    found = threading.Event()

    def pump() -> None:
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("open: "):
                found.set()
        found.set()

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while not found.wait(0.1):
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"stepgraph serve printed no URL in {timeout_s} s: {lines}")
    urls = [line.removeprefix("open: ") for line in lines if line.startswith("open: ")]
    if not urls:
        process.wait(timeout=10)
        raise AssertionError(f"stepgraph serve exited {process.returncode} without a URL: {lines}")
    return Served(process, urls[0], lines)


def run_experiment(path: Path, prefix: str, *flags: str, env: dict[str, str] | None = None,
                   timeout_s: float = 600) -> subprocess.CompletedProcess:
    """`python EXPERIMENT --prefix PREFIX FLAGS` in a subprocess, as a teammate's run would be."""
    return subprocess.run([sys.executable, str(path), "--prefix", prefix, *flags], cwd=REPO,
                          env=env or environment(), capture_output=True, text=True, timeout=timeout_s)


def prefix_bytes(root: Path) -> dict[str, bytes]:
    """Every file under a local prefix with its bytes (and every directory, as None)."""
    found: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        found[str(path.relative_to(root))] = path.read_bytes() if path.is_file() else b"<dir>"
    return found


def events(served: Served, query: str, seconds: float) -> list[tuple[str, dict]]:
    """The server-sent events of `/events?QUERY` received within `seconds`."""
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=seconds)
    connection.request("GET", f"/events?{query}", headers={"Cookie": served.cookie})
    response = connection.getresponse()
    received, name, deadline = [], None, time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            line = response.fp.readline().decode()
            if line.startswith("event: "):
                name = line[len("event: "):].strip()
            elif line.startswith("data: ") and name:
                received.append((name, json.loads(line[len("data: "):])))
    except TimeoutError:
        pass
    finally:
        connection.close()
    return received
