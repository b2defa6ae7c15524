"""relocatable_experiment.py with override_output_path on two steps (words at fixed/words, shout at
fixed/shout; quiet under its id), for tests/executor/test_ids_by_module_file.py: an override path is the
same path under the ids of before issue 44 and today's, so its output is carried over in place.
tests/executor/legacy_override_prefix/ holds its outputs as the executor of before issue 44 made them
(module-qualified ids), written from a copy named exp.py. Do not edit it: that prefix would no longer
match (see legacy_override_prefix.txt).
"""

import enum
import json
from collections import namedtuple
from dataclasses import dataclass

from executor import ExecutorStep, executor_main, open_file, output_path_of, this_output_path


# --- config classes: begin ---
class Case(enum.Enum):
    LOWER = "lower"
    UPPER = "upper"


Span = namedtuple("Span", ["start", "stop"])


@dataclass(frozen=True)
class Style:
    case: Case = Case.UPPER
    span: Span = Span(0, 3)


@dataclass(frozen=True)
class WordsConfig:
    text: str
    output_path: str


@dataclass(frozen=True)
class ShoutConfig:
    words_path: str
    output_path: str
    style: Style = Style()
# --- config classes: end ---


def split_words(config: WordsConfig) -> dict:
    words = config.text.split()
    with open_file(f"{config.output_path}/words.json", "w") as f:
        f.write(json.dumps(words))
    return {"words": len(words)}


def shout(config: ShoutConfig) -> dict:
    with open_file(f"{config.words_path}/words.json", "r") as f:
        words = json.loads(f.read())[config.style.span.start:config.style.span.stop]
    text = " ".join(w.upper() if config.style.case is Case.UPPER else w.lower() for w in words)
    with open_file(f"{config.output_path}/shout.txt", "w") as f:
        f.write(text)
    return {"shouted": len(words)}


@dataclass(frozen=True)
class Options:
    text: str = "moving code keeps ids"  # the words shouted


def build(options: Options) -> list[ExecutorStep]:
    words = ExecutorStep("relocate/words", split_words, WordsConfig(options.text, this_output_path()),
                         override_output_path="fixed/words")
    loud = ExecutorStep("relocate/shout", shout, ShoutConfig(output_path_of(words), this_output_path()),
                        override_output_path="fixed/shout")
    quiet = ExecutorStep("relocate/quiet", shout, ShoutConfig(output_path_of(words), this_output_path(),
                                                              Style(Case.LOWER, Span(1, 4))))
    return [loud, quiet]


if __name__ == "__main__":
    executor_main(build, "steps at fixed paths whose code moves", config=Options())
