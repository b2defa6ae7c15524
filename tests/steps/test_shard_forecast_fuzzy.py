"""The dry run's shard forecast for fuzzy dedup (`fuzzy_dedup.shard_forecast`), in the dry run's
`--json` rows, and counting the results a run would take from `--cache-from` prefixes
(executor/tools/shard_forecast.py): in each case the run then reuses exactly what was forecast."""

from __future__ import annotations

import json
import re
from pathlib import Path

from executor import ExecutorStep, output_path_of, this_output_path
from executor.api import run
from executor.cli import run as cli_run
from steps.dedup import FuzzyDedupConfig, fuzzy_dedup
from tests.steps.test_incremental_shards import SHARDS, corpora  # noqa: F401 (fixture)
from tests.steps.test_shard_forecast import result_of
from tests.steps.test_shard_forecast import pipeline as tokenize_pipeline


def pipeline(source: str) -> list[ExecutorStep]:
    """The upstream copy, then fuzzy dedup of it, tokenize and exact dedup (tests/steps/test_shard_forecast.py)."""
    corpus, tok, dedup = tokenize_pipeline(source, None)
    fuzzy = ExecutorStep("fuzzy-deduped", fuzzy_dedup,
                         FuzzyDedupConfig(output_path_of(corpus, "docs"), this_output_path()))
    return [corpus, fuzzy, tok, dedup]


def with_tokenizer(steps: list[ExecutorStep], corpora) -> list[ExecutorStep]:  # noqa: F811
    corpus, tok, dedup = tokenize_pipeline(steps[0].config.source, corpora["tokenizer"])
    return [corpus, steps[1], tok, dedup]


def dry_run(steps: list[ExecutorStep], prefix: Path, capsys, *extra: str) -> tuple[str, dict]:
    """The dry run's text, and its --json document's shard forecasts by step name."""
    said = {}
    for as_json in (False, True):
        capsys.readouterr()
        argv = ["--prefix", str(prefix), "--runner", "inline", "--dry-run", *extra, *(["--json"] if as_json else [])]
        code = cli_run(steps, "grow", argv=argv, environ={})
        out = capsys.readouterr()
        assert code == 0, out
        said[as_json] = out.out if as_json else re.sub(r"\s+", " ", out.out + out.err)
    rows = json.loads(said[True])["steps"]
    return said[False], {row["name"]: row.get("shard_forecast") for row in rows}


def test_fuzzy_dedup_forecasts_the_shards_a_grown_corpus_reuses_in_text_and_json(corpora, tmp_path,  # noqa: F811
                                                                                 capsys):
    prefix = tmp_path / "prefix"
    first, grown = (with_tokenizer(pipeline(corpora[n]), corpora) for n in ("first", "grown"))
    assert run(first[1:], prefix=str(prefix), runner="inline").ok
    assert run(grown[:1], prefix=str(prefix), runner="inline").ok  # the upstream has written the grown corpus
    text, rows = dry_run(grown[1:], prefix, capsys)
    for name in ("fuzzy-deduped", "tokenized", "deduped"):
        assert f"{name}: expects to reuse {SHARDS - 2} of {SHARDS} shards (2 to process)" in text, text
        assert rows[name] == {"reused": SHARDS - 2, "to_process": 2, "shards": SHARDS}, rows
    made = run(grown[1:], prefix=str(prefix), runner="inline")
    assert made.ok
    result = result_of(prefix, made.step(grown[1]).output_path)
    assert (result["shards_reused"], result["shards_processed"]) == (SHARDS - 2, 2)


def test_a_forecast_counts_results_under_cache_from_prefixes(corpora, tmp_path, capsys):  # noqa: F811
    """A new prefix whose steps' earlier outputs are under a --cache-from prefix: without the flag
    nothing is forecast reused, with it the unchanged shards, and the run with it reuses them."""
    team, mine = tmp_path / "team", tmp_path / "mine"
    first, grown = (with_tokenizer(pipeline(corpora[n]), corpora) for n in ("first", "grown"))
    assert run(first[1:], prefix=str(team), runner="inline").ok
    assert run(grown[:1], prefix=str(mine), runner="inline").ok
    text, rows = dry_run(grown[1:], mine, capsys)
    assert f"fuzzy-deduped: expects to reuse 0 of {SHARDS} shards ({SHARDS} to process)" in text, text
    text, rows = dry_run(grown[1:], mine, capsys, "--cache-from", str(team))
    for name in ("fuzzy-deduped", "tokenized", "deduped"):
        assert f"{name}: expects to reuse {SHARDS - 2} of {SHARDS} shards (2 to process)" in text, text
        assert rows[name] == {"reused": SHARDS - 2, "to_process": 2, "shards": SHARDS}, rows
    made = run(grown[1:], prefix=str(mine), runner="inline", cache_from=(str(team),))
    assert made.ok
    for step in grown[1:]:
        result = result_of(mine, made.step(step).output_path)
        assert (result["shards_reused"], result["shards_processed"]) == (SHARDS - 2, 2), step.name


def test_a_json_forecast_says_why_it_cannot_tell(corpora, tmp_path, capsys):  # noqa: F811
    prefix = tmp_path / "prefix"
    steps = pipeline(corpora["first"])
    text, rows = dry_run(steps[1:], prefix, capsys)  # the upstream has not run: no manifest yet
    assert rows["fuzzy-deduped"] == {"reason": "not forecast: corpus runs first (its manifest will say)"}, rows
    assert "fuzzy-deduped: not forecast: corpus runs first" in text, text
