"""Each compiled kernel lives with its Python owner: one extension module per owner, the records
layer's knowing nothing of the cleaner's structures, and none of them missing where CI requires them.

The owners: the scan (``kcompact.records.scan._accel``: records, batch headers, legacy runs, key
digests, the KRaft metadata log's record headers), the offset map (``kcompact.log.offset_map._runs``:
its run kernels) and the round (``kcompact.cleaner.round._windows``: its windows over runs of batches).
Each owner's ``accel`` module wraps its own extension and follows the one switch, ``KCOMPACT_NO_ACCEL``.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from kcompact.cleaner.round import accel as round_accel
from kcompact.log.offset_map import accel as offset_map_accel
from kcompact.records.scan import accel as scan_accel

PACKAGE = Path(__file__).parents[1] / "kcompact"
OWNERS: dict[str, tuple[ModuleType, set[str]]] = {
    "kcompact.records.scan._accel": (scan_accel, {
        "scan_keys", "scan_key_digests", "scan_records", "rebuild_records", "decode_batch", "crc32c",
        "batch_headers", "batch_producers", "legacy_entries", "legacy_emit", "metadata_rows",
    }),
    "kcompact.log.offset_map._runs": (offset_map_accel, {
        "flush_puts", "fold_into_run", "merge_runs_step",
    }),
    "kcompact.cleaner.round._windows": (round_accel, {
        "scan_window_key_digests", "scan_window_records", "emit_window", "zstd_version", "zlib_version",
        "forget_inflated", "inflated_held",
    }),
}


def _kernel_names(module: ModuleType) -> set[str]:
    return {name for name in dir(module) if not name.startswith("_") and name != "ScanError"}


@pytest.mark.parametrize("name", sorted(OWNERS))
def test_each_owner_imports_exactly_its_own_kernels(name: str) -> None:
    wrapper, expected = OWNERS[name]
    if wrapper.kernels is None:
        pytest.skip(f"{name} is not built ({wrapper.import_error})")
    assert wrapper.kernels.__name__ == name
    assert _kernel_names(wrapper.kernels) == expected


@pytest.mark.parametrize("name", sorted(OWNERS))
def test_every_extension_is_built_when_required(name: str) -> None:
    """CI sets KCOMPACT_REQUIRE_ACCEL=1: there each owner's fast path must be the one under test."""
    if os.environ.get("KCOMPACT_REQUIRE_ACCEL", "") in ("", "0"):
        pytest.skip("KCOMPACT_REQUIRE_ACCEL is not set: the pure-Python fallback is allowed")
    wrapper = OWNERS[name][0]
    assert wrapper.kernels is not None, f"{name} did not import: {wrapper.import_error}"


def test_switched_off_no_owner_calls_its_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    class Exploding:
        def __getattr__(self, attribute: str) -> object:
            raise AssertionError(f"kernel {attribute} used while accel.enabled is False")

    monkeypatch.setattr(scan_accel, "enabled", False)
    for wrapper in (offset_map_accel, round_accel):
        monkeypatch.setattr(wrapper, "kernels", Exploding())
    assert offset_map_accel.flush_puts([], 12) is None
    assert offset_map_accel.merge_runs_step((), (), (), 12, 0, 0, 0) is None  # type: ignore[arg-type]
    assert round_accel.scan_window_key_digests(b"", 0, 0, 0, 1, 0) is None
    assert round_accel.scan_window_records(b"", 0, 0, 1, 1, 1, np.empty(0, np.int64), 0) is None


def test_records_layer_c_knows_no_cleaner_structure() -> None:
    """The records layer's C names none of the offset map's or the round's kernels or structures."""
    sources = sorted((PACKAGE / "records").rglob("*.[ch]"))
    assert sources
    for source in sources:
        text = source.read_text()
        for word in ("flush_puts", "fold_into_run", "merge_runs", "PackedPut", "emit_window",
                     "scan_window"):
            assert word not in text, f"{source.relative_to(PACKAGE)} mentions {word}"


def test_c_sources_stay_small_and_xxhash_is_vendored_apart() -> None:
    own = [path for path in PACKAGE.rglob("*.[ch]") if "_vendor" not in path.parts]
    assert own
    for path in own:
        lines = len(path.read_text().splitlines())
        assert lines <= 1000, f"{path.relative_to(PACKAGE)}: {lines} lines"
    vendored = PACKAGE / "_vendor" / "xxhash"
    assert (vendored / "xxhash.h").is_file()
    assert "BSD 2-Clause" in (vendored / "LICENSE").read_text()
    assert not list((PACKAGE / "records").rglob("xxhash.h"))
