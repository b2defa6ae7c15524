"""A dry run refuses what a run would refuse, with the same words (issue 47: a heartbeat interval of
half the lease TTL or more was refused by a run and accepted by --dry-run): both check the lease
settings through api._lease_settings, before the prefix is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor import api
from executor.core.errors import ExecutorError
from executor.tools.loading import load_experiment

REFUSED = [("--heartbeat-interval", "30", "--lease-ttl", "60"), ("--heartbeat-interval", "45", "--lease-ttl", "60"),
           ("--heartbeat-interval", "5", "--lease-ttl", "9")]


@pytest.mark.parametrize("flags", REFUSED, ids=" ".join)
def test_a_dry_run_refuses_the_lease_settings_a_run_refuses(flags, toy):
    code, out, err = toy.run("--dry-run", *flags, split=True)
    run_code, run_out, run_err = toy.run("--runner", "inline", *flags, split=True)
    assert code == run_code == 2 and out == run_out == "", (out, run_out)
    assert err == run_err and err.startswith(f"error: --heartbeat-interval {flags[1]} with --lease-ttl {flags[3]}: "), err
    assert "lower --heartbeat-interval or raise --lease-ttl" in err
    assert not Path(toy.prefix).exists()  # refused before anything was read or written


def test_just_under_half_is_accepted_by_both(toy):
    assert toy.run("--dry-run", "--heartbeat-interval", "29.9", "--lease-ttl", "60")[0] == 0
    assert toy.run("--runner", "inline", "--heartbeat-interval", "29.9", "--lease-ttl", "60")[0] == 0


def test_the_api_plans_with_the_checks_it_runs_with(toy):
    graph = load_experiment(str(toy.path), []).graph
    options = api.Options(prefix=toy.prefix, lease_ttl=60, heartbeat_interval=30)
    with pytest.raises(ExecutorError, match="--heartbeat-interval 30 with --lease-ttl 60"):
        api.decide(graph, options)
    with pytest.raises(ExecutorError, match="--heartbeat-interval 30 with --lease-ttl 60"):
        api.run_graph(graph, options)
