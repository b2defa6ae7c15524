"""The dry run's shard forecast (executor/tools/shard_forecast.py, `tokenize.shard_forecast`,
`exact_dedup.shard_forecast`): after a 16-shard corpus was tokenized and deduplicated and a grown
corpus (one shard added, one changed, one removed) was written by the upstream step, the dry run says
how many shards each data step expects to reuse, from the upstream manifest and listings of the
stored shard indexes, and the real run then reuses exactly that many. Also the run report and the
forecast's honest "not forecast" lines."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from executor import ExecutorStep, open_file, output_path_of, this_output_path, url_to_fs
from executor.api import run
from executor.cli import run as cli_run
from executor.engine.prefix.prefixes import open_prefix
from executor.tools.run_report import write_report
from steps.dedup.exact import ExactDedupConfig, exact_dedup
from steps.tokenize import TokenizeConfig, tokenize
from tests.steps.test_incremental_shards import SHARDS, corpora  # noqa: F401 (fixture)


@dataclass(frozen=True)
class CorpusConfig:
    source: str
    output_path: str


def copy_corpus(config: CorpusConfig) -> dict:
    """The upstream step: the source folder's documents copied into `<output>/docs`."""
    fs, root = url_to_fs(config.source)
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(root, detail=False) if p.endswith(".jsonl.zst"))
    for name in names:
        with open_file(f"{config.source}/{name}", "rb") as src, open_file(f"{config.output_path}/docs/{name}", "wb") as dst:
            dst.write(src.read())
    return {"files": len(names)}


def pipeline(source: str, tokenizer: str | None,
             num_output_shards: int = 0) -> tuple[ExecutorStep, ExecutorStep, ExecutorStep]:
    corpus = ExecutorStep("corpus", copy_corpus, CorpusConfig(source, this_output_path()))
    tok = ExecutorStep("tokenized", tokenize, TokenizeConfig(output_path_of(corpus, "docs"), this_output_path(),
                                                             tokenizer_path=tokenizer,
                                                             num_output_shards=num_output_shards,
                                                             validation_fraction=0.2))
    dedup = ExecutorStep("deduped", exact_dedup, ExactDedupConfig(output_path_of(corpus, "docs"), this_output_path()))
    return corpus, tok, dedup


def dry_run(steps: list[ExecutorStep], prefix: Path, capsys) -> str:
    capsys.readouterr()
    code = cli_run(steps, "grow", argv=["--prefix", str(prefix), "--runner", "inline", "--dry-run"], environ={})
    out = capsys.readouterr()
    assert code == 0, out
    return re.sub(r"\s+", " ", out.out + out.err)


def result_of(prefix: Path, output_path: str) -> dict:
    return json.loads((Path(output_path) / ".executor" / "record.json").read_text())["result"]


@pytest.mark.parametrize("num_output_shards", [0, 5])  # 5: input files' results under by-file/, counted per file
def test_the_dry_run_forecasts_the_shards_a_grown_corpus_reuses_and_the_run_reuses_them(num_output_shards, corpora,
                                                                                         tmp_path, capsys):
    prefix = tmp_path / "prefix"
    first = pipeline(corpora["first"], corpora["tokenizer"], num_output_shards)
    assert run(list(first[1:]), prefix=str(prefix), runner="inline").ok
    grown = pipeline(corpora["grown"], corpora["tokenizer"], num_output_shards)
    assert run([grown[0]], prefix=str(prefix), runner="inline").ok  # the upstream has written the grown corpus
    said = dry_run(list(grown[1:]), prefix, capsys)
    assert f"tokenized: expects to reuse {SHARDS - 2} of {SHARDS} shards (2 to process)" in said, said
    assert f"deduped: expects to reuse {SHARDS - 2} of {SHARDS} shards (2 to process)" in said, said
    made = run(list(grown[1:]), prefix=str(prefix), runner="inline")
    assert made.ok
    for step in grown[1:]:
        result = result_of(prefix, made.step(step).output_path)
        assert (result["shards_reused"], result["shards_processed"]) == (SHARDS - 2, 2)
    report = Path(write_report(open_prefix(str(prefix)), made.run_file)).read_text()  # the run report, as the command line writes it
    assert report.count(f"shards: 2 processed, {SHARDS - 2} reused") == 2


def test_a_forecast_says_why_it_cannot_tell(corpora, tmp_path, capsys):
    prefix = tmp_path / "prefix"
    trained = pipeline(corpora["first"], None)
    assert run([trained[0]], prefix=str(prefix), runner="inline").ok
    said = dry_run([trained[1]], prefix, capsys)
    assert "tokenized: not forecast: the tokenizer is trained on the input" in said, said
    fresh = pipeline(corpora["grown"], corpora["tokenizer"])  # its upstream has not run: no manifest yet
    said = dry_run(list(fresh[1:]), prefix, capsys)
    assert "tokenized: not forecast: corpus runs first (its manifest will say)" in said, said
