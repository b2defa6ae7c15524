"""Bad input to the data steps: clear errors naming file, line and value, or counted skips."""

from __future__ import annotations

import gzip
import json

import pytest

from steps.dedup import ExactDedupConfig, FuzzyDedupConfig, exact_dedup, fuzzy_dedup
from steps.documents import BadInputError, ReadStats, list_document_files, read_documents

GOOD = json.dumps({"id": "ok-1", "text": "A perfectly fine document."})


@pytest.mark.parametrize("bad_line, message", [
    ('{"id": "x", "text": "unterminated', "not valid UTF-8 JSON"),
    ('{"id": "no-text"}', "has no 'text' field"),
    ('{"id": "null-text", "text": null}', "'text' must be a string, got NoneType"),
    ('["a", "list"]', "expected a JSON object, got list"),
    (b'{"id": "latin1", "text": "caf\xe9"}', "not valid UTF-8 JSON"),
])
def test_bad_line_is_an_error_naming_file_and_line(write_jsonl, tmp_path, bad_line, message):
    directory = write_jsonl([GOOD, bad_line, GOOD])
    with pytest.raises(BadInputError) as error:
        exact_dedup(ExactDedupConfig(directory, str(tmp_path / "out")))
    text = str(error.value)
    assert f"{directory}/part-0.jsonl:2" in text and message in text and "on_bad_line='skip'" in text
    assert not (tmp_path / "out" / "docs").exists()  # nothing written, not a truncated output


def test_skip_counts_and_reports_bad_lines(write_jsonl, tmp_path):
    directory = write_jsonl([GOOD, '{"id": "no-text"}', b'\xff\xfe garbage', "", GOOD.replace("ok-1", "ok-2")])
    result = fuzzy_dedup(FuzzyDedupConfig(directory, str(tmp_path / "out"), on_bad_line="skip"))
    assert result["skipped_lines"] == 2
    assert result["documents_in"] == 2 and result["documents_out"] == 1  # ok-2 is an exact copy
    assert "part-0.jsonl:2" in result["skipped_examples"][0]


def test_integer_ids_become_strings_and_compressed_inputs_are_read(tmp_path):
    (tmp_path / "in").mkdir()
    with gzip.open(tmp_path / "in" / "a.jsonl.gz", "wt") as f:
        f.write(json.dumps({"id": 7, "text": "seven"}) + "\n")
    stats = ReadStats()
    docs = list(read_documents(str(tmp_path / "in" / "a.jsonl.gz"), stats=stats))
    assert docs == [{"id": "7", "text": "seven"}] and stats.documents == 1


def test_missing_or_empty_inputs_name_the_path(tmp_path):
    with pytest.raises(BadInputError, match="does not exist"):
        list_document_files(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInputError, match="holds no document files"):
        list_document_files(str(tmp_path / "empty"))
    with pytest.raises(BadInputError, match="glob matched no files"):
        list_document_files(str(tmp_path / "empty" / "*.jsonl"))


def test_a_step_output_directory_is_read_through_its_docs_subdirectory(tmp_path):
    (tmp_path / "step" / "docs").mkdir(parents=True)
    (tmp_path / "step" / "docs" / "a.jsonl").write_text(GOOD + "\n")
    (tmp_path / "step" / "manifest.json").write_text("{}")
    assert list_document_files(str(tmp_path / "step")) == [str(tmp_path / "step" / "docs" / "a.jsonl")]
