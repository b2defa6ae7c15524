"""A cloud metadata server on loopback, as GCE and EC2 (IMDSv2) serve theirs at 169.254.169.254."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

TOKEN = "imds-token-1"


class _Handler(BaseHTTPRequestHandler):
    server: "MetadataServer"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _answer(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def do_PUT(self) -> None:
        self.server.asked.append(("PUT", self.path))
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self._answer(200, TOKEN)
        else:
            self._answer(400, "")

    def do_GET(self) -> None:
        self.server.asked.append(("GET", self.path))
        time.sleep(self.server.delay_s)
        if self.path == "/latest/meta-data/placement/region" and self.server.ec2_region:
            ok = self.headers.get("X-aws-ec2-metadata-token") == TOKEN
            self._answer(200 if ok else 401, self.server.ec2_region if ok else "")
        elif self.path == "/computeMetadata/v1/instance/zone" and self.server.gce_zone:
            ok = self.headers.get("Metadata-Flavor") == "Google"
            self._answer(200 if ok else 403, f"projects/42/zones/{self.server.gce_zone}" if ok else "",
                         {"Metadata-Flavor": "Google"} if self.server.says_google else {})
        else:
            self._answer(404, "")


class MetadataServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, ec2_region: str = "", gce_zone: str = "", delay_s: float = 0.0, says_google: bool = True):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.ec2_region, self.gce_zone, self.delay_s, self.says_google = ec2_region, gce_zone, delay_s, says_google
        self.asked: list[tuple[str, str]] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


@contextmanager
def metadata_server(**answers: object) -> Iterator[MetadataServer]:
    server = MetadataServer(**answers)  # type: ignore[arg-type]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
