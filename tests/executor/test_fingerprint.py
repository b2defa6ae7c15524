"""The code fingerprint (executor/engine/run/fingerprint.py): what it reaches, what it ignores, and a
long-lived process that sees every edit (the cache is per function and per source-file state)."""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path

import pytest

from executor import ExecutorStep, api, this_output_path
from executor.engine.run.fingerprint import code_fingerprint, is_user_file
from executor.tools.drift import find_drift

HELPERS = '''\
import json

LIMIT = 3


def transform(text):
    """Cut and shout."""
    return json.dumps(text[:LIMIT].upper())


class Shouter:
    def go(self, text):
        return transform(text)
'''

STEPS = '''\
from dataclasses import dataclass
from pathlib import Path

import {helpers}
from {helpers} import transform


@dataclass(frozen=True)
class Config:
    text: str
    output_path: str


def shout(config: Config):
    Path(config.output_path, "out.txt").write_text(transform(config.text))


def via_class(config: Config):
    Path(config.output_path, "out.txt").write_text({helpers}.Shouter().go(config.text))


def plain(config: Config):
    Path(config.output_path, "out.txt").write_text(config.text)
'''


@pytest.fixture
def modules(tmp_path, monkeypatch, request):
    """A steps module and its helpers module, importable under names of this test's own."""
    suffix = f"{os.getpid()}_{abs(hash(request.node.name)) % 10**8}"
    helpers, steps = f"fp_helpers_{suffix}", f"fp_steps_{suffix}"
    (tmp_path / f"{helpers}.py").write_text(HELPERS)
    (tmp_path / f"{steps}.py").write_text(STEPS.format(helpers=helpers))
    old = time.time_ns() - 2 * 10**10  # older than the racy window: fingerprints of them are cached
    for path in (tmp_path / f"{helpers}.py", tmp_path / f"{steps}.py"):
        os.utime(path, ns=(old, old))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module(steps), tmp_path / f"{helpers}.py", helpers
    sys.modules.pop(steps, None)
    sys.modules.pop(helpers, None)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_it_reaches_helpers_classes_and_constants_of_the_users_modules_only(modules):
    steps, _, helpers = modules
    reached = set(code_fingerprint(steps.shout).functions)
    stem = steps.__name__
    assert reached == {f"{stem}.shout", f"{stem}.Config", f"{helpers}.transform", f"{helpers}.LIMIT"}
    assert set(code_fingerprint(steps.via_class).functions) == {
        f"{stem}.via_class", f"{stem}.Config", f"{helpers}.Shouter", f"{helpers}.transform", f"{helpers}.LIMIT"}
    assert set(code_fingerprint(steps.plain).functions) == {f"{stem}.plain", f"{stem}.Config"}
    assert not is_user_file(os.path.join.__code__.co_filename)  # the standard library
    assert not is_user_file(pytest.__file__)  # site-packages
    assert not is_user_file(api.__file__)  # the executor itself


def test_docstrings_comments_and_layout_change_nothing(modules):
    steps, helpers_file, helpers = modules
    before = code_fingerprint(steps.shout)
    edit(helpers_file, '"""Cut and shout."""', '"""Cut, then shout."""  # reworded\n\n')
    edit(helpers_file, "json.dumps(text[:LIMIT].upper())", "json.dumps(\n        text[:LIMIT].upper(),  # wrapped\n    )")
    assert code_fingerprint(steps.shout) == before
    edit(helpers_file, "LIMIT = 3", "LIMIT = 4")
    after = code_fingerprint(steps.shout)
    assert after.digest != before.digest
    assert {n for n in after.functions if after.functions[n] != before.functions[n]} == {f"{helpers}.LIMIT"}


def test_a_long_lived_process_sees_an_edit_between_two_plans(modules, tmp_path):
    """One process: run, edit the helper file (not re-imported), plan again: the drift is seen."""
    steps, helpers_file, helpers = modules
    step = ExecutorStep("ll/shout", steps.shout, steps.Config("hi there", this_output_path()))
    prefix = str(tmp_path / "prefix")
    assert api.run([step], prefix=prefix, runner="inline").ok
    for _ in range(3):  # the fingerprint is cached by now (the files are older than the racy window)
        planned = api.plan([step], prefix=prefix)
        assert find_drift(planned.plan, planned.prefix, planned.fs) == []
    edit(helpers_file, "text[:LIMIT].upper()", "text[:LIMIT].lower()")
    old = time.time_ns() - 10**10  # same size, an mtime outside the racy window: only the file's state tells
    os.utime(helpers_file, ns=(old, old))
    planned = api.plan([step], prefix=prefix)
    [drift] = find_drift(planned.plan, planned.prefix, planned.fs)
    assert drift.name == "ll/shout" and drift.changed == (f"{helpers}.transform",)
    strict = api.plan([step], prefix=prefix, drift="strict")
    assert strict.step("ll/shout").decision == "run"
    assert strict.step("ll/shout").reason == f"code changed: {helpers}.transform"
