"""Where this runner is: `EXECUTOR_REGION`, else the cloud's metadata server when one answers
within a second (issue 30.4).

Both clouds serve their metadata at 169.254.169.254 (no DNS lookup needed), and both are asked at
once, each on a daemon thread, so a machine on neither cloud waits at most `timeout_s`:
- GCE: `GET /computeMetadata/v1/instance/zone` with `Metadata-Flavor: Google` answers
  `projects/N/zones/us-central1-a`, the region being `us-central1`;
- EC2 (IMDSv2): `PUT /latest/api/token`, then `GET /latest/meta-data/placement/region` with it.
The switches and endpoints are the cloud SDKs' own, so a machine configured for them needs nothing
new: `NO_GCE_CHECK=true` and `GCE_METADATA_IP` (google-auth), `AWS_EC2_METADATA_DISABLED=true` and
`AWS_EC2_METADATA_SERVICE_ENDPOINT` (botocore), read from the process's environment (as the SDKs
read them) and the run's. Only a run on a bucket prefix asks (regions.py).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any, Callable, Mapping

REGION_VAR = "EXECUTOR_REGION"
METADATA_IP = "169.254.169.254"
TIMEOUT_S = 1.0


def _gce_region(environ: Mapping[str, str], timeout_s: float) -> str | None:
    import urllib.request  # here: urllib.request brings http.client, email and ssl, which every plan would import

    host = environ.get("GCE_METADATA_IP") or METADATA_IP
    request = urllib.request.Request(f"http://{host}/computeMetadata/v1/instance/zone",
                                     headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # noqa: S310 - a fixed http URL
        if answer.headers.get("Metadata-Flavor") != "Google":
            return None  # something else answers at this address
        zone = answer.read().decode().strip().rsplit("/", 1)[-1]  # us-central1-a
    return zone.rsplit("-", 1)[0] if zone.count("-") >= 2 else None


def _ec2_region(environ: Mapping[str, str], timeout_s: float) -> str | None:
    import urllib.request

    base = (environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or f"http://{METADATA_IP}").rstrip("/")
    ask_token = urllib.request.Request(f"{base}/latest/api/token", method="PUT",
                                       headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    with urllib.request.urlopen(ask_token, timeout=timeout_s) as answer:  # noqa: S310
        token = answer.read().decode().strip()
    ask_region = urllib.request.Request(f"{base}/latest/meta-data/placement/region",
                                        headers={"X-aws-ec2-metadata-token": token})
    with urllib.request.urlopen(ask_region, timeout=timeout_s) as answer:  # noqa: S310
        return answer.read().decode().strip() or None


PROBES: dict[str, tuple[str, Callable[[Mapping[str, str], float], str | None]]] = {
    "the GCE metadata server": ("NO_GCE_CHECK", _gce_region),
    "the EC2 metadata server": ("AWS_EC2_METADATA_DISABLED", _ec2_region),
}


def runner_region(environ: Mapping[str, str], timeout_s: float = TIMEOUT_S) -> tuple[str | None, str]:
    """(the region, where it came from), or (None, "") when neither the variable nor a metadata
    server within `timeout_s` says."""
    region = (environ.get(REGION_VAR) or "").strip()
    if region:
        return region, REGION_VAR
    environ = {**os.environ, **environ}  # the SDKs' switches apply to the process, as the SDKs read them
    answers: queue.Queue[tuple[str, str | None]] = queue.Queue()

    def ask(source: str, probe: Callable[[Mapping[str, str], float], str | None]) -> None:
        try:
            answers.put((source, probe(environ, timeout_s)))
        except Exception:  # noqa: BLE001 - no server, a refusal, a timeout: this cloud does not say
            answers.put((source, None))

    asked = [(source, probe) for source, (switch, probe) in PROBES.items()
             if str(environ.get(switch, "")).lower() != "true"]
    for source, probe in asked:  # daemon threads: a lookup that hangs never holds up the exit
        threading.Thread(target=ask, args=(source, probe), daemon=True, name="region-probe").start()
    return _first_answer(answers, len(asked), timeout_s)


def _first_answer(answers: "queue.Queue[tuple[str, Any]]", expected: int, timeout_s: float) -> tuple[str | None, str]:
    """The first region one of `expected` probes gave within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    for _ in range(expected):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            source, region = answers.get(timeout=left)
        except queue.Empty:
            break
        if region:
            return region, source
    return None, ""
