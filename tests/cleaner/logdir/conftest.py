"""Fixtures of the log-dir tests: a real small volume to fill (``tests/full_volume.py``)."""

from tests.full_volume import small_volume  # noqa: F401 (a fixture, found here by pytest)
