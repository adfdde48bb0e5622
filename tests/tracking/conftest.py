"""The tracking tests' fixtures: a small tmpfs (a disk that fills), shared from the fault tests."""

from tests.faults.conftest import tmpfs  # noqa: F401  (the fixture, shared here)
