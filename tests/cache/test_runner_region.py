"""Where a runner is (issue 30.4): EXECUTOR_REGION, else the cloud's metadata server when one
answers within a second (GCE's zone, EC2's IMDSv2 region), each behind the cloud SDK's own switch.
The servers here are loopback stand-ins (tests/cache/metadata_server.py)."""

from __future__ import annotations


from executor.engine.transfers.runner_region import runner_region
from tests.cache.metadata_server import metadata_server


def ec2_at(address: str) -> dict[str, str]:
    return {"AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://{address}", "AWS_EC2_METADATA_DISABLED": "false",
            "NO_GCE_CHECK": "true"}


def gce_at(address: str) -> dict[str, str]:
    return {"GCE_METADATA_IP": address, "NO_GCE_CHECK": "false", "AWS_EC2_METADATA_DISABLED": "true"}


def test_the_variable_wins_and_no_server_is_asked():
    with metadata_server(ec2_region="eu-west-1") as server:
        assert runner_region({"EXECUTOR_REGION": "us-east-2", **ec2_at(server.address)}) == \
            ("us-east-2", "EXECUTOR_REGION")
        assert server.asked == []


def test_ec2_imdsv2_answers_with_a_token():
    with metadata_server(ec2_region="eu-west-1") as server:
        assert runner_region(ec2_at(server.address)) == ("eu-west-1", "the EC2 metadata server")
        assert server.asked == [("PUT", "/latest/api/token"), ("GET", "/latest/meta-data/placement/region")]


def test_gce_answers_with_its_zone_and_the_region_is_taken_from_it():
    with metadata_server(gce_zone="europe-west4-a") as server:
        assert runner_region(gce_at(server.address)) == ("europe-west4", "the GCE metadata server")


def test_an_answer_not_from_google_is_not_taken_for_gce():
    with metadata_server(gce_zone="europe-west4-a", says_google=False) as server:
        assert runner_region(gce_at(server.address)) == (None, "")


def test_a_server_that_does_not_answer_within_the_second_leaves_the_region_unknown():
    with metadata_server(ec2_region="eu-west-1", delay_s=5.0) as server:
        # the server answers only after 5 s: a region of None says the 0.5 s timeout ended the wait
        # (waiting for the answer would have found eu-west-1), with no window on a loaded machine's clock
        assert runner_region(ec2_at(server.address), timeout_s=0.5) == (None, "")


def test_the_sdks_switches_turn_both_off():
    with metadata_server(ec2_region="eu-west-1", gce_zone="us-central1-b") as server:
        off = {"AWS_EC2_METADATA_DISABLED": "true", "NO_GCE_CHECK": "True",
               "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://{server.address}", "GCE_METADATA_IP": server.address}
        assert runner_region(off) == (None, "") and server.asked == []
