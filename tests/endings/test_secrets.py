"""A secret passed as a flag never reaches storage or the console (issue 12, item 1).

gated.py declares `token: str = secret("")`; after a run, a failed run and a dry run, the value is
nowhere under the prefix (run files, records, statuses, logs) nor in stdout/stderr.
"""

from __future__ import annotations

import subprocess

import pytest

from executor.engine.run.provenance import redact_argv, secret_flag_names
from tests.endings.gated import Options
from tests.endings.harness import Driver

SECRET = "tok-5e3c2b7a9d"


@pytest.mark.parametrize("args, behaviour, code", [
    ((), {}, 0),
    ((), {"first": "raise"}, 1),
    (("--dry-run",), {}, 0),
], ids=["run", "failed-run", "dry-run"])
def test_secret_flag_is_written_nowhere(local, sidefx, tmp_path, args, behaviour, code):
    d = Driver(local, sidefx, tmp_path / "run.log", "--token", SECRET, *args, **behaviour)
    assert d.wait() == code, d.output()[-3000:]
    assert SECRET not in d.output()
    prefix = tmp_path / "prefix"
    if "--dry-run" not in args:
        assert list(prefix.rglob("record.json")) and list(prefix.glob("runs/*.json"))
    leaked = subprocess.run(["grep", "-rl", SECRET, str(tmp_path)], capture_output=True, text=True).stdout
    assert leaked.strip() == "", f"the secret was written to: {leaked}"
    if "--dry-run" not in args:
        run_file = next(prefix.glob("runs/*.json")).read_text()
        assert '"--token",\n   "***"' in run_file or '"***"' in run_file


def test_redaction_covers_declared_secrets_and_secret_looking_flags():
    argv = ["exp.py", "--token", "a", "--train.api-key=b", "--db_password", "c", "--secret-thing", "d",
            "--greeting", "hi", "--my-token=e", "--dry-run", "--prefix", "p"]
    assert redact_argv(argv, secret_flag_names(Options())) == [
        "exp.py", "--token", "***", "--train.api-key=***", "--db_password", "***", "--secret-thing", "***",
        "--greeting", "hi", "--my-token=***", "--dry-run", "--prefix", "p"]


def test_secret_flag_names_are_found_in_nested_configs():
    from dataclasses import dataclass, field

    from executor import secret

    @dataclass
    class Inner:
        credential_file: str = secret("")
        size: int = 1

    @dataclass
    class Outer:
        inner: Inner = field(default_factory=Inner)
        hf_auth: str = secret("")

    assert secret_flag_names(Outer) == {"inner.credential_file", "hf_auth"}
    assert redact_argv(["x", "--hf-auth", "v", "--inner.credential-file=w"], secret_flag_names(Outer())) == \
        ["x", "--hf-auth", "***", "--inner.credential-file=***"]
