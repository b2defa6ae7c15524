"""BucketPrefix: from `gs://bucket/path` to object names and back."""

from __future__ import annotations

import pytest

from executor.engine.store import StoreError
from executor.engine.store.fs import BucketPrefix


def test_keys_map_to_object_names_under_the_path_and_back():
    location = BucketPrefix.parse("gs://bucket/a/b/", ("gs",))
    assert (location.bucket, location.path, location.url) == ("bucket", "a/b", "gs://bucket/a/b")
    assert location.object_name("step-1/.executor/status.json") == "a/b/step-1/.executor/status.json"
    assert location.key_of("a/b/step-1/.executor/status.json") == "step-1/.executor/status.json"
    assert location.list_prefix("step-") == "a/b/step-"
    assert location.list_prefix("") == "a/b/"


def test_a_bucket_root_prefix_has_no_path():
    location = BucketPrefix.parse("s3://bucket", ("s3",))
    assert location.object_name("k") == "k" and location.key_of("k") == "k"
    assert location.list_prefix("") == "" and location.url == "s3://bucket"


@pytest.mark.parametrize("prefix", ["bucket/path", "s3://bucket", "gs://", "gs:///x"])
def test_bad_prefixes_are_refused_with_the_expected_form(prefix):
    with pytest.raises(StoreError, match="gs://"):
        BucketPrefix.parse(prefix, ("gs",))


def test_an_empty_key_is_refused():
    with pytest.raises(StoreError, match="empty key"):
        BucketPrefix.parse("gs://b/p", ("gs",)).object_name("")
