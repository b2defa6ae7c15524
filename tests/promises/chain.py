"""A small experiment for the promise tests:  a ──> b ──> c,  and d beside them (holding a secret).

    a fails with --fail-a; each step writes the pid of the process that ran it, so a re-run is visible
    in the bytes; d's token comes from $CHAIN_TOKEN and is declared secret().
"""

import os
from dataclasses import dataclass

from executor import ExecutorStep, executor_main, output_path_of, secret, this_output_path
from executor.engine.prefix import location


@dataclass(frozen=True)
class LinkConfig:
    label: str
    output_path: str
    upstream: str | None = None
    fail: bool = False
    token: str = secret("")


def link(config: LinkConfig) -> dict:
    if config.fail:
        raise RuntimeError(f"{config.label} fails on purpose")
    fs, path = location.url_to_fs(f"{config.output_path}/out.txt")
    seen = ""
    if config.upstream:
        ufs, upath = location.url_to_fs(config.upstream)
        seen = ufs.cat_file(upath).decode()
    fs.pipe_file(path, f"{config.label} pid={os.getpid()} <- [{seen}]".encode())
    return {"label": config.label, "token_chars": len(config.token)}


@dataclass(frozen=True)
class ChainOptions:
    fail_a: bool = False  # make step a fail


def build(options: ChainOptions) -> list[ExecutorStep]:
    a = ExecutorStep("chain/a", link, LinkConfig("a", this_output_path(), fail=options.fail_a))
    b = ExecutorStep("chain/b", link, LinkConfig("b", this_output_path(), output_path_of(a, "out.txt")))
    c = ExecutorStep("chain/c", link, LinkConfig("c", this_output_path(), output_path_of(b, "out.txt")))
    d = ExecutorStep("chain/d", link, LinkConfig("d", this_output_path(),
                                                 token=os.environ.get("CHAIN_TOKEN", "")))
    return [c, d]


if __name__ == "__main__":
    executor_main(build, "promise chain", config=ChainOptions())
