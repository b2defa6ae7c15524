"""The stored formats (status, record, run file): byte-stable, schema-versioned, and refused with a
clear error when damaged or newer than this executor."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError

import pytest

from executor.core.errors import StatusError
from executor.core.record import (Owner, RunRecordRef, State, Status, StepRecord, output_digest, parse_record,
                                  parse_run_file, parse_status, to_json_bytes)


def test_the_stored_formats_never_change_by_accident():
    """Older executors and people read these files: sorted keys, the same indentation, schema 1."""
    status = Status(State.SUCCESS, "d" * 8, "s-1", 3, 1, Owner("r", "h", 7, "u"), 1.5, inputs={"z": "1", "a": "2"})
    assert status.to_bytes() == (
        b'{\n "alias_of": null,\n "attempt": 1,\n "content_sha256": null,\n "digest": "dddddddd",\n "error": null,\n'
        b' "function_sha256": null,\n "inputs": {\n  "a": "2",\n  "z": "1"\n },\n "owner": {\n  "host": "h",\n'
        b'  "pid": 7,\n  "run_id": "r",\n  "user": "u"\n },\n "schema": 1,\n "seq": 3,\n "started_at": null,\n'
        b' "state": "SUCCESS",\n "step_id": "s-1",\n "traceback_tail": null,\n "written_at": 1.5\n}')
    record = StepRecord("s-1", "d", "s", {"b": 1, "a": 2}, {"x": 1}, [], {}, None, [], {}, 1, "r")
    assert record.to_bytes() == (
        b'{"attempt": 1, "config": {"x": 1}, "dependencies": [], "digest": "d", "extra": {}, "identity": '
        b'{"a": 2, "b": 1}, "manifest": [], "name": "s", "provenance": {}, "result": null, "result_type": null, '
        b'"run_id": "r", "schema": 1, "step_id": "s-1", "timings": {}}')
    assert to_json_bytes({"b": [1], "a": {"d": 1, "c": 2}}) == b'{\n "a": {\n  "c": 2,\n  "d": 1\n },\n "b": [\n  1\n ]\n}'


def _status(**changes) -> bytes:
    data = json.loads(Status(State.RUNNING, "d", "s-1", 0, 1, None, 0.0).to_bytes())
    return json.dumps({**data, **changes}).encode()


def test_a_status_of_an_older_schema_is_read_and_a_newer_one_refused():
    assert parse_status(_status(schema=0), "k").state is State.RUNNING
    for newer in (2, 3):
        with pytest.raises(StatusError, match=f"k: status schema {newer} is newer than this executor understands"):
            parse_status(_status(schema=newer), "k")
    with pytest.raises(StatusError, match="k: corrupt status file .*DONE"):
        parse_status(_status(state="DONE"), "k")


@pytest.mark.parametrize("parse, kind, fields", [
    (parse_record, "record", {"step_id": "s-1", "digest": "d", "name": "s"}),
    (parse_run_file, "run file", {"run_id": "r", "steps": []}),
])
def test_records_and_run_files_are_checked_before_any_tool_reads_them(parse, kind, fields):
    for schema in (0, 1):  # this executor's, and older ones
        assert parse(json.dumps({"schema": schema, **fields}).encode(), "f") == {"schema": schema, **fields}
    with pytest.raises(StatusError, match=f"f: {kind} schema 2 is newer than this executor understands \\(1\\)"):
        parse(json.dumps({"schema": 2, **fields}).encode(), "f")
    for damaged in (b"[1]", b'{"schema": "1"}', json.dumps(fields).encode()):
        with pytest.raises(StatusError, match=f"f: not a {kind} \\(no integer `schema` field\\); it was left untouched"):
            parse(damaged, "f")
    for damaged in (b"{not json", b"\xff\xfe"):
        with pytest.raises(StatusError, match=f"f: corrupt {kind} \\("):
            parse(damaged, "f")
    first = next(iter(fields))
    with pytest.raises(StatusError, match=f"f: corrupt {kind}: no {first} field\\(s\\)"):
        parse(json.dumps({"schema": 1, **{k: v for k, v in fields.items() if k != first}}).encode(), "f")


@pytest.mark.parametrize("manifest, damage", [
    ({"a.txt": {}}, "its manifest is a dict, not a list of files"),
    ([{"path": "a.txt"}, {"size": 3}], 'manifest entry 1 names no path: {"size": 3}'),
    ([{"path": 7}], 'manifest entry 0 names no path: {"path": 7}'),
    (["a.txt"], 'manifest entry 0 names no path: "a.txt"'),
    ([{"size": 3, "note": "x" * 100}], 'manifest entry 0 names no path: ' + ('{"size": 3, "note": "' + "x" * 100)[:80]),
])
def test_a_record_whose_manifest_names_no_path_is_refused_naming_the_entry(manifest, damage):
    fields = {"schema": 1, "step_id": "s-1", "digest": "d", "name": "s"}
    assert parse_record(json.dumps({**fields, "manifest": [{"path": "a.txt", "size": 3}]}).encode(), "f")
    with pytest.raises(StatusError) as info:
        parse_record(json.dumps({**fields, "manifest": manifest}).encode(), "f")
    assert str(info.value) == (f"f: corrupt record: {damage}; it was left untouched. "
                               "Re-run the step with --force-run to rewrite it.")


def test_an_outputs_digest_does_not_depend_on_the_order_of_a_checksums_keys():
    one = output_digest([{"path": "a", "checksum": {"md5": "x", "size": 1}}])
    assert one == output_digest([{"path": "a", "checksum": {"size": 1, "md5": "x"}}])
    assert one != output_digest([{"path": "a", "checksum": {"md5": "y", "size": 1}}])


def test_owners_and_run_references_are_frozen_values():
    """Parsed statuses share one Owner object per writer: none may change it under the others."""
    with pytest.raises(FrozenInstanceError):
        Owner("r", "h", 1, "u").pid = 2  # type: ignore[misc]
    ref = RunRecordRef("exp", "2026-01-01T00-00-00-abc")
    assert {ref: 1}[RunRecordRef("exp", "2026-01-01T00-00-00-abc")] == 1 and ref.key.startswith("runs/exp-")
    with pytest.raises(FrozenInstanceError):
        ref.run_id = "x"  # type: ignore[misc]
