"""An option a command does not take is named as such, never "did you mean" itself (issue 47:
`stepgraph ids --prefix` said "did you mean --prefix?"); a real typo still gets its nearest spelling."""

from __future__ import annotations

import pytest

from executor.__main__ import build_parser

from .toy import run_main

REFUSED = {  # command line -> what the message must say
    ("ids", "toy.py", "--prefix", "/tmp/p"): "`stepgraph ids` takes no --prefix: step ids are computed from the "
                                             "experiment file (and its flags after --) alone, whatever the prefix; "
                                             "drop it",
    ("check", "experiments/", "--storage-options", "{}"): "`stepgraph check` takes no --storage-options",
    ("completion", "bash", "--prefix", "/tmp/p"): "`stepgraph completion` takes no --prefix",
    ("ps", "--pin", "x"): "`stepgraph ps` takes no --pin: it is an option of gc; drop it",
}


@pytest.mark.parametrize("argv", sorted(REFUSED), ids=" ".join)
def test_an_option_of_another_command_is_named_not_suggested(argv):
    code, out = run_main(*argv)
    assert code == 2 and REFUSED[argv] in out and "did you mean" not in out, out


def test_a_typo_still_gets_its_nearest_spelling():
    code, out = run_main("ps", "--prefx", "/tmp/p")
    assert code == 2 and "did you mean --prefix?" in out, out


def test_no_option_is_ever_suggested_as_itself():
    parser = build_parser()
    everything = {o for p in parser.commands.values() for o in p.options if o.startswith("--")}
    for name, command in parser.commands.items():
        for option in sorted(everything - set(command.options)):
            code, out = run_main(name, option, "x")
            assert code == 2 and f"did you mean {option}?" not in out, (name, option, out)
