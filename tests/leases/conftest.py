"""Lease proofs: real executor subprocesses against a local directory and the GCS / S3 emulators."""

from tests.emulators import gcs_emulator, s3_emulator  # noqa: F401  (session fixtures)
from tests.leases.harness import backend, sidefx  # noqa: F401
