"""What the region checks decide and say, called as the engine calls them (executor.api, executor.cli):
`check_run_region` before anything runs, `note_cross_region_reads` (`survey`) for the plan's notes and
the transfer budget. Buckets in three S3 regions on the session's moto server (moto keeps each
bucket's region); a bucket that does not exist stands for one whose metadata cannot be read."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass

import pytest

from executor import ExecutorStep, mirrored, output_path_of
from executor.core.errors import ExecutorError
from executor.core.graph import build_graph
from executor.core.locations import Storage
from executor.core.plan import Observed, PlanOptions, plan_steps
from executor.core.record import State, Status
from executor.engine.prefix import location
from executor.engine.events import CrossRegionNoted, Events
from executor.engine.transfers.regions import (CrossRegionRead, Undetermined, check_run_region, locate_bucket,
                                     note_cross_region_reads, same_region, survey)
from executor.tools.console_view import ConsoleView
from tests.emulators import S3_FAKE_CREDENTIALS, S3_REGION, s3_emulator  # noqa: F401  (session fixture)

NO_METADATA_SERVERS = {"AWS_EC2_METADATA_DISABLED": "true", "NO_GCE_CHECK": "true"}
NO_SUCH_BUCKET = "FileNotFoundError: The specified bucket does not exist"


@dataclass(frozen=True)
class Cfg:
    source: object = None
    dep: object = None


def fn(config):
    return None


class Reporter:
    """What a console renderer is handed: info (markup) and warning (plain) lines."""

    def __init__(self):
        self.infos: list[str] = []
        self.warnings: list[str] = []

    def info(self, text: str) -> None:
        self.infos.append(text)

    def warning(self, text: str) -> None:
        self.warnings.append(text)


@dataclass(frozen=True)
class Buckets:
    storage: Storage
    us: str  # the emulator's own bucket, us-west-2 (S3_REGION)
    eu: str  # eu-west-1, holding data.bin (3000 bytes) and the tree under d/
    east: str  # us-east-1: S3 answers its location as null
    missing: str  # no such bucket: its location cannot be read

    def fs(self):
        return location.url_to_fs(f"s3://{self.us}", self.storage)[0]


@pytest.fixture(scope="module")
def buckets(s3_emulator):
    import botocore.session

    def client(region):
        return botocore.session.get_session().create_client(
            "s3", endpoint_url=s3_emulator.endpoint_url, region_name=region,
            aws_access_key_id=S3_FAKE_CREDENTIALS["key"], aws_secret_access_key=S3_FAKE_CREDENTIALS["secret"])

    tag = uuid.uuid4().hex[:10]
    eu, east = f"eu-{tag}", f"east-{tag}"
    client("eu-west-1").create_bucket(Bucket=eu, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    client("us-east-1").create_bucket(Bucket=east)  # no LocationConstraint: us-east-1
    files = {"data.bin": 3000, "d/part-1": 100, "d/part-10": 200, "d/part-1.idx": 400, "d/sub/a.bin": 1000,
             "d/sub/b.bin": 10000}
    for key, size in files.items():
        client("eu-west-1").put_object(Bucket=eu, Key=key, Body=b"x" * size)
    return Buckets(Storage({"s3://": s3_emulator.storage_options}), s3_emulator.bucket, eu, east,
                   f"missing-{tag}")


def prefix_in(bucket: str) -> str:
    return f"s3://{bucket}/runs-{uuid.uuid4().hex[:8]}"


def plan_of(*steps, succeeded=()):
    graph = build_graph(steps)
    snapshot = {}
    for step in succeeded:
        digest = graph.digest_of(step)
        snapshot[digest] = Observed(Status(State.SUCCESS, digest, graph.nodes[digest].step_id, 1, 1, None, 0.0), "g")
    return plan_steps(graph, snapshot, PlanOptions())


def reading(source, name="r/copy"):
    return ExecutorStep(name, fn, Cfg(source))


# -- same_region: the comparison behind --allow-cross-region -----------------------------------

@pytest.mark.parametrize("bucket_location, region, same", [
    ("US-WEST-2", "us-west-2", True),  # the region itself, whatever the case
    ("us-west-2", "US-WEST-2", True),
    ("US", "us-central1", True),  # a multi-region holds its regions
    ("ASIA", "asia-east1", True),
    ("EU-WEST-1", "us-west-2", False),  # either order of the names
    ("US-WEST-2", "eu-west-1", False),
    ("US-EAST-1", "us-east-2", False),
    ("US-CENTRAL1", "us", False),  # a region does not hold its multi-region
])
def test_a_bucket_is_local_to_its_own_region_and_to_the_regions_of_its_multi_region(bucket_location, region, same):
    assert same_region(bucket_location, region) is same


# -- check_run_region: the runner's region against the prefix's ----------------------------------

def test_a_runner_in_another_region_than_the_prefix_is_refused_naming_both(buckets):
    prefix, reporter = prefix_in(buckets.us), Reporter()
    with pytest.raises(ExecutorError) as refused:
        check_run_region(prefix, buckets.storage, {"EXECUTOR_REGION": "eu-west-1"}, False, reporter)
    assert str(refused.value) == (
        f"this runner is in eu-west-1 (EXECUTOR_REGION) and the prefix {prefix} is in US-WEST-2: every read and "
        "write would cross regions; nothing was started. Use a prefix in eu-west-1, or pass --allow-cross-region")
    assert reporter.warnings == []


def test_allowed_the_mismatch_is_a_warning_and_the_run_goes_on(buckets):
    prefix, reporter = prefix_in(buckets.us), Reporter()
    check_run_region(prefix, buckets.storage, {"EXECUTOR_REGION": "eu-west-1"}, True, reporter)
    assert reporter.warnings == [
        f"this runner is in eu-west-1 (EXECUTOR_REGION) and the prefix {prefix} is in US-WEST-2: every read and "
        "write would cross regions (allowed by --allow-cross-region)"]


@pytest.mark.parametrize("allow", [False, True])
@pytest.mark.parametrize("region", [S3_REGION, S3_REGION.upper()])
def test_a_runner_in_the_prefix_region_says_nothing(buckets, region, allow):
    reporter = Reporter()
    check_run_region(prefix_in(buckets.us), buckets.storage, {"EXECUTOR_REGION": region}, allow, reporter)
    assert reporter.warnings == reporter.infos == []


def test_a_prefix_whose_location_cannot_be_read_is_said_with_the_error_not_refused(buckets):
    prefix, reporter = prefix_in(buckets.missing), Reporter()
    check_run_region(prefix, buckets.storage, {"EXECUTOR_REGION": "eu-west-1"}, False, reporter)
    assert reporter.warnings == [
        f"region check: could not tell whether the prefix is in eu-west-1 (EXECUTOR_REGION): the location of "
        f"bucket {buckets.missing} could not be read ({NO_SUCH_BUCKET})"]


@pytest.mark.parametrize("prefix, environ", [
    ("local", {"EXECUTOR_REGION": "eu-west-1"}),  # a local prefix: nothing to compare, nothing asked
    ("missing", NO_METADATA_SERVERS),  # no region known: the bucket is not even asked
])
def test_nothing_is_compared_for_a_local_prefix_or_an_unknown_region(buckets, tmp_path, prefix, environ):
    reporter = Reporter()
    where = str(tmp_path / "prefix") if prefix == "local" else prefix_in(buckets.missing)
    check_run_region(where, buckets.storage, environ, False, reporter)
    assert reporter.warnings == reporter.infos == []


# -- survey / note_cross_region_reads: the plan's inputs in other locations ------------------------

@pytest.mark.parametrize("prefix_side", ["us", "eu"])
def test_a_read_crossing_either_way_is_noted_with_both_locations_and_its_size(buckets, prefix_side):
    if prefix_side == "us":
        prefix, source, there, here, size = prefix_in(buckets.us), f"s3://{buckets.eu}/data.bin", "EU-WEST-1", \
            "US-WEST-2", 3000
    else:  # the other way round: the prefix's bucket name and location sort first
        key = f"in/{uuid.uuid4().hex[:8]}.bin"
        buckets.fs().pipe_file(f"{buckets.us}/{key}", b"y" * 70)
        prefix, source, there, here, size = prefix_in(buckets.eu), f"s3://{buckets.us}/{key}", "US-WEST-2", \
            "EU-WEST-1", 70
    emitted, reporter = [], Reporter()
    reads = note_cross_region_reads(plan_of(reading(source)), prefix, buckets.storage, Events([emitted.append]))
    assert reads == [CrossRegionRead("r/copy", source, there, here, size)]
    assert emitted == [CrossRegionNoted("r/copy", source, there, here, size)]  # data; the console styles it
    ConsoleView(reporter)(emitted[0])
    assert reporter.infos == [f"[yellow]cross-region read:[/] r/copy reads {source} (0.00 GB) from {there}; "
                              f"the prefix is in {here}"]
    assert reporter.warnings == []


def test_inputs_in_the_prefix_bucket_or_not_in_a_bucket_are_never_asked_about(buckets):
    """Even with the prefix's location unreadable: its own bucket cannot be elsewhere, and a local
    path or a plain word is not a bucket read."""
    prefix = prefix_in(buckets.missing)
    steps = [reading(f"s3://{buckets.missing}/raw/data.bin", "a"), reading("/data/local.bin", "b"),
             reading("memory://scratch/x", "c"), reading("just words", "d")]
    assert survey(plan_of(*steps), prefix, buckets.storage) == ([], [])


def test_with_the_prefix_location_unreadable_every_input_elsewhere_is_undetermined(buckets):
    prefix, source = prefix_in(buckets.missing), f"s3://{buckets.eu}/data.bin"
    assert survey(plan_of(reading(source)), prefix, buckets.storage) == ([], [Undetermined(
        "r/copy", source, f"the location of bucket {buckets.missing} could not be read ({NO_SUCH_BUCKET}) "
                          "(the prefix's)")])


def test_an_input_whose_bucket_location_cannot_be_read_is_said_never_taken_for_the_same_region(buckets):
    source, reporter = f"s3://{buckets.missing}/data.bin", Reporter()
    view = ConsoleView(reporter)
    reads = note_cross_region_reads(plan_of(reading(source)), prefix_in(buckets.us), buckets.storage, Events([view]))
    assert reads == [] and reporter.infos == []
    assert reporter.warnings == [
        f"cross-region check: could not tell whether r/copy reading {source} crosses regions: the location of "
        f"bucket {buckets.missing} could not be read ({NO_SUCH_BUCKET})"]


def test_inputs_anywhere_in_the_config_are_found_but_a_mirrored_one_is_read_from_its_copy(buckets):
    @dataclass(frozen=True)
    class Inner:
        path: str

    eu = f"s3://{buckets.eu}"
    config = Cfg(source={"train": [f"{eu}/d/part-1", (f"{eu}/d/part-10",)], "other": Inner(f"{eu}/d/sub/a.bin"),
                         "same": f"{eu}/d/part-1", "mirrored": mirrored(f"{eu}/data.bin")})
    reads, unknown = survey(plan_of(ExecutorStep("r/many", fn, config)), prefix_in(buckets.us), buckets.storage)
    assert [(r.url, r.bytes) for r in reads] == [(f"{eu}/d/part-1", 100), (f"{eu}/d/part-10", 200),
                                                 (f"{eu}/d/sub/a.bin", 1000)]
    assert unknown == []


@pytest.mark.parametrize("first_complete", [True, False])
def test_each_step_that_will_run_is_charged_its_own_reads_only(buckets, first_complete):
    """A complete step reads nothing; a step reading another's output is not charged that step's inputs."""
    first = reading(f"s3://{buckets.eu}/d/part-1", "first")
    then = ExecutorStep("then", fn, Cfg(f"s3://{buckets.eu}/d/part-10", output_path_of(first)))
    plan = plan_of(then, succeeded=[first] if first_complete else [])
    assert [d.node.name for d in plan.decisions.values()] == ["first", "then"]
    reads, _ = survey(plan, prefix_in(buckets.us), buckets.storage)
    assert [(r.step, r.bytes) for r in reads] == [("first", 100)] * (not first_complete) + [("then", 200)]


@pytest.mark.parametrize("key, size", [
    ("data.bin", 3000),
    ("d", 11700),  # a folder: everything below it
    ("d/*", 11700),  # part-1, part-10, part-1.idx and the folder sub (what lies below it), each once
    ("d/**", 11700),  # d itself, and every folder and file below it: still each byte once
    ("d/part-1*", 700),  # part-1 is no folder of part-10 or part-1.idx
    ("d/sub/*.bin", 11000),
    ("d/part-?", 100),
])
def test_a_cross_region_read_counts_the_bytes_it_names_once(buckets, key, size):
    source = f"s3://{buckets.eu}/{key}"
    [read], _ = survey(plan_of(reading(source)), prefix_in(buckets.us), buckets.storage)
    assert (read.bytes, read.size_problem) == (size, None)


@pytest.mark.parametrize("key", ["absent.bin", "absent/*", "d/*.parquet"])
def test_a_cross_region_read_of_nothing_has_an_unknown_size_not_zero(buckets, key):
    source = f"s3://{buckets.eu}/{key}"
    [read], _ = survey(plan_of(reading(source)), prefix_in(buckets.us), buckets.storage)
    assert (read.bytes, read.size_problem) == (None, "nothing found at that path")
    assert read.describe() == (f"r/copy reads {source} (size unknown: nothing found at that path) from EU-WEST-1; "
                               "the prefix is in US-WEST-2")


class Refusing:
    """A bucket's filesystem whose metadata calls (`refused`) fail as a store without permission does."""

    def __init__(self, fs, refused, message):
        self._fs, self._refused, self._message = fs, refused, message

    def __getattr__(self, name):
        if name not in self._refused:
            return getattr(self._fs, name)

        def refuse(*args, **kwargs):
            raise PermissionError(self._message)
        return refuse


LONG = "Access Denied: " + "the caller may not read this bucket's metadata; " * 8  # over 200 characters


@pytest.mark.parametrize("key", ["data.bin", "d/*"])
def test_a_size_that_cannot_be_listed_is_unknown_with_the_error_cut_short(buckets, monkeypatch, key):
    real = location.url_to_fs

    def refusing_listings(url, storage=None, **overrides):
        fs, path = real(url, storage, **overrides)
        return Refusing(fs, {"exists", "glob", "du"}, LONG), path

    monkeypatch.setattr(location, "url_to_fs", refusing_listings)
    [read], _ = survey(plan_of(reading(f"s3://{buckets.eu}/{key}")), prefix_in(buckets.us), buckets.storage)
    assert (read.bytes, read.size_problem) == (None, f"listing failed (PermissionError: {LONG[:200]})")


def test_a_bucket_location_that_cannot_be_read_is_said_with_the_error_cut_short(buckets, monkeypatch):
    real = location.url_to_fs

    def refusing_eu(url, storage=None, **overrides):
        fs, path = real(url, storage, **overrides)
        return (Refusing(fs, {"call_s3"}, LONG) if buckets.eu in url else fs), path

    monkeypatch.setattr(location, "url_to_fs", refusing_eu)
    source = f"s3://{buckets.eu}/data.bin"
    assert survey(plan_of(reading(source)), prefix_in(buckets.us), buckets.storage) == ([], [Undetermined(
        "r/copy", source, f"the location of bucket {buckets.eu} could not be read (PermissionError: {LONG[:200]})")])


# -- locate_bucket and the notes themselves ----------------------------------------------------------

def test_bucket_locations_read_upper_case_and_a_null_answer_is_us_east_1(buckets):
    assert locate_bucket(f"s3://{buckets.eu}/data.bin", buckets.storage) == ("EU-WEST-1", None)
    assert locate_bucket(f"s3://{buckets.east}/k", buckets.storage) == ("US-EAST-1", None)
    assert locate_bucket(f"s3://{buckets.us}", buckets.storage) == ("US-WEST-2", None)


@pytest.mark.parametrize("url, protocol", [("/tmp/data.bin", "file"), ("memory://b/k", "memory"),
                                           ("webhdfs://namenode/data", "webhdfs")])
def test_a_store_without_bucket_locations_says_so(url, protocol):
    assert locate_bucket(url, Storage({})) == (None, f"no way to read a bucket location for {protocol}://")


@pytest.mark.parametrize("size, said", [(2_500_000_000, "2.50 GB"), (10**9, "1.00 GB"), (5 * 10**6, "0.01 GB")])
def test_a_read_says_its_size_in_gigabytes_of_a_billion_bytes(size, said):
    read = CrossRegionRead("s", "s3://b/k", "EU-WEST-1", "US-WEST-2", size)
    assert read.describe() == f"s reads s3://b/k ({said}) from EU-WEST-1; the prefix is in US-WEST-2"


@pytest.mark.parametrize("note", [CrossRegionRead("s", "s3://b/k", "EU", "US", None, "why"),
                                  Undetermined("s", "s3://b/k", "why")])
def test_the_notes_are_values_the_budget_can_hold(note):
    """Fixed once the plan has noted them (the budget check and the run read the same), and hashable:
    transfers.Transfers, itself a frozen value, holds the reads of unknown size."""
    from executor.engine.transfers.budget import Transfers

    with pytest.raises(dataclasses.FrozenInstanceError):
        note.url = "s3://elsewhere/k"
    assert hash(note) == hash(dataclasses.replace(note)) and len({note, dataclasses.replace(note)}) == 1
    assert hash(Transfers(0, 0, 0, (note,))) == hash(Transfers(0, 0, 0, (dataclasses.replace(note),)))
