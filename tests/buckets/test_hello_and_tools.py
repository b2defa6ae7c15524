"""experiments/hello.py and every tool on a bucket: run, no-op re-run, verify, status, ps, explain,
adopt, gc, repair, on fake-gcs-server and on moto, credentials given only as storage options.

Both run with the inline runner (cheap: no Ray cluster to start). The Ray runner on both buckets,
with the options reaching its workers only inside each StepCall and each attempt's log uploaded
next to the status, is covered by test_tiny_moe.py."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from executor.__main__ import main as tools_main
from tests.buckets.conftest import REPO, _AMBIENT, assert_no_secret, run_experiment

HELLO = str(REPO / "experiments" / "hello.py")


@pytest.fixture(autouse=True)
def no_ambient_credentials(monkeypatch):
    for name in _AMBIENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def tool(capsys, bucket, command: str, *args: str) -> tuple[int, str]:
    code = tools_main([command, "--storage-options", bucket.options_json, *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def step_ids(output: str) -> dict[str, str]:
    """{name: step id} from the lines `▶ hello/words → <prefix>/hello/words-<hash>`."""
    return {m.group(1): f"{m.group(1)}-{m.group(2)}" for m in re.finditer(r"▶ (hello/\w+) → \S+-([0-9a-f]{12})", output)}


@pytest.mark.parametrize("bucket", ["gs", "s3"], indirect=True)   # the emulators are the session's
def test_hello_and_the_tools_on_a_bucket(bucket, capsys):
    runner = ["--runner", "inline"]
    first = run_experiment("hello.py", bucket, *runner)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "5/5 step(s) succeeded, 5 ran here" in first.stdout
    ids = step_ids(first.stdout)
    assert len(ids) == 5, first.stdout
    summary_path = f"{bucket.prefix}/{ids['hello/summary']}"
    objects = bucket.objects()
    assert objects[f"{ids['hello/summary']}/summary.txt"].startswith(b"HELLO! The most common word is 'the'")

    with ThreadPoolExecutor(2) as pool:  # both only read what the first run wrote: at once, one per core
        again, explained = pool.map(lambda args: run_experiment("hello.py", bucket, *args),
                                    [runner, ["--explain", "hello/greeting", "--greeting", "Howdy"]])
    assert again.returncode == 0 and "all 5 step(s) already succeeded; nothing to do" in again.stdout, again.stdout

    code, out = tool(capsys, bucket, "verify", bucket.prefix)
    assert code == 0 and "5 step(s) verified, 0 problem(s)" in out, out
    code, out = tool(capsys, bucket, "status", summary_path)
    assert code == 0 and f"{ids['hello/summary']}  SUCCESS" in out, out
    code, out = tool(capsys, bucket, "ps", "--prefix", bucket.prefix)
    assert code == 0 and "no RUNNING leases" in out, out

    assert explained.returncode == 0, explained.stdout + explained.stderr
    assert ids["hello/greeting"] in explained.stdout and "Howdy" in explained.stdout, explained.stdout

    code, out = tool(capsys, bucket, "adopt", "--prefix", bucket.prefix, HELLO, "hello/greeting",
                     "--from", ids["hello/greeting"], "--reason", "same greeting, other word", "--", "--greeting", "Howdy")
    assert code == 0 and "is now an alias of" in out, out
    alias = re.search(r"adopted: (\S+) is now an alias", out).group(1)
    code, out = tool(capsys, bucket, "status", f"{bucket.prefix}/{alias}")
    assert code == 0 and f"alias of    {ids['hello/greeting']}" in out, out

    code, out = tool(capsys, bucket, "gc", "--prefix", bucket.prefix, HELLO)
    assert code == 0 and "1 unreachable" in out and alias in out, out
    code, out = tool(capsys, bucket, "gc", "--prefix", bucket.prefix, HELLO, "--delete", "--grace-hours", "0")
    assert code == 0 and f"deleted {alias}" in out, out
    assert not any(path.startswith(alias + "/") for path in bucket.objects())

    code, out = tool(capsys, bucket, "repair", "--delete-status", summary_path)
    assert code == 0, out
    assert f"{ids['hello/summary']}/.executor/status.json" not in bucket.objects()
    rerun = run_experiment("hello.py", bucket, "--runner", "inline")
    assert rerun.returncode == 0 and "5/5 step(s) succeeded, 1 ran here" in rerun.stdout, rerun.stdout

    runs = [json.loads(data) for path, data in bucket.objects().items() if path.startswith("runs/") and path.endswith(".json")]
    assert runs and all("***" in run["invocation"]["argv"] for run in runs)  # the flag's value, redacted
    assert_no_secret(bucket, first.stdout, first.stderr, again.stdout, rerun.stdout, rerun.stderr, explained.stdout)
