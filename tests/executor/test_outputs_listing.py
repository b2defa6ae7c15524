"""A step's manifest is listed again when the listing raced a writer in this process: fsspec's memory
filesystem iterates one process-wide dict that steps running as threads add files to meanwhile (found
by the stress loop: one of 258 concurrent steps on memory:// failed "could not write the record:
RuntimeError: dictionary changed size during iteration")."""

from __future__ import annotations

import pytest
from fsspec.implementations.memory import MemoryFileSystem

from executor.engine.prefix import outputs


class RacingMemory(MemoryFileSystem):
    """The memory filesystem, whose next `races` listings fail as a listing that raced a writer does."""

    cachable = False  # its own instance: the counter is this test's alone

    def __init__(self, races: int, message: str = "dictionary changed size during iteration"):
        super().__init__()
        self.races, self.message, self.listings = races, message, 0

    def find(self, path, *args, **kwargs):
        self.listings += 1
        if self.races:
            self.races -= 1
            raise RuntimeError(self.message)
        return super().find(path, *args, **kwargs)


@pytest.fixture
def output(tmp_path):
    root = f"/listing-{tmp_path.name}/step-1"
    MemoryFileSystem().pipe(f"{root}/out.txt", b"hello\n")
    yield root
    MemoryFileSystem().rm(f"/listing-{tmp_path.name}", recursive=True)


def test_a_listing_that_raced_a_writer_is_taken_again(output):
    fs = RacingMemory(races=outputs.LISTING_TRIES - 1)
    assert [e["path"] for e in outputs.manifest(fs, output)] == ["out.txt"]
    assert fs.listings == outputs.LISTING_TRIES


def test_a_listing_that_keeps_racing_fails_after_its_tries(output):
    fs = RacingMemory(races=outputs.LISTING_TRIES)
    with pytest.raises(RuntimeError, match="changed size during iteration"):
        outputs.manifest(fs, output)
    assert fs.listings == outputs.LISTING_TRIES


def test_any_other_error_of_a_listing_is_not_retried(output):
    fs = RacingMemory(races=1, message="something else broke")
    with pytest.raises(RuntimeError, match="something else broke"):
        outputs.manifest(fs, output)
    assert fs.listings == 1
