"""Hello, stepgraph: five plain-Python steps, no ML. Read it in a minute, run it in seconds.

    uv run python experiments/hello.py              # run everything (again: skips everything)
    uv run python experiments/hello.py --dry-run    # the plan, with a reason per step
    uv run python experiments/hello.py --greeting Howdy   # only the greeting branch re-runs

The graph:   words ──> count ──┐
             greeting ──> shout ┴──> summary
"""

import json
import time
from collections import Counter
from dataclasses import dataclass

from executor import ExecutorStep, execution_only, executor_main, open_file, output_path_of, this_output_path


# Steps read and write through open_file, so the same code works on a local disk, gs:// and s3://.
def read_text(path: str) -> str:
    with open_file(path, "r") as f:
        return f.read()


def write_text(path: str, text: str) -> None:
    with open_file(path, "w") as f:
        f.write(text)


# -- the step functions: a frozen config in, files in the step's own output directory out --------
@dataclass(frozen=True)
class WordsConfig:
    text: str
    output_path: str


def split_words(config: WordsConfig) -> dict:
    words = config.text.lower().split()
    write_text(f"{config.output_path}/words.json", json.dumps(words))
    return {"words": len(words)}


@dataclass(frozen=True)
class CountConfig:
    words_path: str
    output_path: str


def count_words(config: CountConfig) -> dict:
    words = json.loads(read_text(config.words_path))
    counts = Counter(words).most_common()
    write_text(f"{config.output_path}/counts.json", json.dumps(counts))
    return {"distinct": len(counts)}


@dataclass(frozen=True)
class GreetingConfig:
    greeting: str
    output_path: str


def write_greeting(config: GreetingConfig) -> dict:
    write_text(f"{config.output_path}/greeting.txt", config.greeting)
    return {"chars": len(config.greeting)}


@dataclass(frozen=True)
class ShoutConfig:
    greeting_path: str
    output_path: str
    pause_s: float = execution_only(0.0)  # how it runs, not what it makes: not part of the id
    fail_for_demo: bool = execution_only(False)  # see how a failure blocks only its dependents


def shout(config: ShoutConfig) -> dict:
    time.sleep(config.pause_s)
    if config.fail_for_demo:
        raise RuntimeError("failing on purpose (--fail-shout): the words branch still finishes")
    loud = read_text(config.greeting_path).upper() + "!"
    write_text(f"{config.output_path}/shout.txt", loud)
    return {"shout": loud}


@dataclass(frozen=True)
class SummaryConfig:
    counts_path: str
    shout_path: str
    output_path: str


def summarize(config: SummaryConfig) -> dict:
    top_word, top_count = json.loads(read_text(config.counts_path))[0]
    line = f"{read_text(config.shout_path)} The most common word is {top_word!r} ({top_count}x)."
    write_text(f"{config.output_path}/summary.txt", line + "\n")
    print(line)
    return {"summary": line}


# -- the experiment: its own flags, and the graph they produce -----------------------------------
@dataclass(frozen=True)
class HelloOptions:
    greeting: str = "Hello"  # the word the greeting starts with
    text: str = "the quick brown fox jumps over the lazy dog and the cat"  # the text whose words are counted
    fail_shout: bool = False  # make the shout step fail (to see a failure and --force-failed)
    pause_s: float = 0.0  # seconds the shout step sleeps (to watch progress or Ctrl-C a run)


def build(options: HelloOptions) -> list[ExecutorStep]:
    words = ExecutorStep("hello/words", split_words, WordsConfig(options.text, this_output_path()))
    count = ExecutorStep("hello/count", count_words,
                         CountConfig(output_path_of(words, "words.json"), this_output_path()))
    greeting = ExecutorStep("hello/greeting", write_greeting, GreetingConfig(options.greeting, this_output_path()))
    loud = ExecutorStep("hello/shout", shout,
                        ShoutConfig(output_path_of(greeting, "greeting.txt"), this_output_path(),
                                    pause_s=options.pause_s, fail_for_demo=options.fail_shout))
    summary = ExecutorStep("hello/summary", summarize,
                           SummaryConfig(output_path_of(count, "counts.json"),
                                         output_path_of(loud, "shout.txt"), this_output_path()))
    return [summary]


if __name__ == "__main__":
    executor_main(build, "hello, stepgraph", config=HelloOptions())
