"""Build script for kcompact's compiled parts; every other setting is in pyproject.toml.

Why a setup.py: pyproject.toml cannot declare a C extension for setuptools. Three extensions (plain
CPython C API), one per Python owner, each beside the package that imports it:

* ``kcompact.records.scan._accel`` (records/scan/_accel.c, _legacy.c): the record and batch-header
  scans, the record-section rebuild, legacy runs, key digests, the KRaft metadata log's record frames;
* ``kcompact.log.offset_map._runs`` (log/offset_map/_runs.c): the offset map's run kernels;
* ``kcompact.cleaner.round._windows`` (cleaner/round/_windows.c): the round's windows over runs of
  batches, which walk records with the scan's ``records/scan/walk.h`` and (de)compress zstd batches
  with the vendored Zstandard in ``kcompact/_vendor/zstd/`` (python-zstandard's own library version),
  compiled in with every symbol hidden, and gzip, snappy and lz4 batches in C (``_windows_codecs.c``;
  gzip through the system zlib, ``-lz``, the library CPython's own zlib module is linked with).

All three include ``kcompact/_native/common.h`` (the ScanError contract, argument checks, varints,
and, from ``crc32c.h``, CRC-32C) and, where they hash keys, the vendored xxHash in
``kcompact/_vendor/xxhash/``. Each is ``optional=True``: where there is no C compiler the build
prints a warning and the install goes on with the pure-Python code, which stays the reference
(each owner's ``accel.py`` picks whichever is there).
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup

NATIVE = "kcompact/_native"
XXHASH = "kcompact/_vendor/xxhash"  # vendored xxHash 0.8.4 (BSD 2-Clause): key digests
ZSTD = "kcompact/_vendor/zstd"  # vendored Zstandard 1.5.6 (BSD): the windows' zstd batches
# its symbols hidden (as python-zstandard builds it), so no other libzstd a process loads can clash
ZSTD_ARGS = ["-DZSTDLIB_VISIBLE=", "-DZDICTLIB_VISIBLE=", "-DZSTDERRORLIB_VISIBLE="] + (
    [] if sys.platform == "win32" else ["-fvisibility=hidden"])
SCAN = "kcompact/records/scan"
INCLUDE_DIRS = [NATIVE, XXHASH, SCAN]
COMMON = [f"{NATIVE}/common.h", f"{NATIVE}/crc32c.h"]

EXTENSIONS = [
    Extension(
        "kcompact.records.scan._accel",
        # _legacy.c: the walk of legacy (magic 0/1) entries, registered in _accel.c's method table
        sources=[f"{SCAN}/_accel.c", f"{SCAN}/_legacy.c"],
        depends=[*COMMON, f"{SCAN}/walk.h", f"{SCAN}/_legacy.h", f"{XXHASH}/xxhash.h"],
        include_dirs=INCLUDE_DIRS,
        optional=True,  # no compiler: warn and install the pure-Python package
    ),
    Extension(
        "kcompact.log.offset_map._runs",
        sources=["kcompact/log/offset_map/_runs.c"],
        depends=COMMON,
        include_dirs=INCLUDE_DIRS,
        optional=True,
    ),
    Extension(
        "kcompact.cleaner.round._windows",
        # _windows_zstd.c: its zstd batches through the vendored library; _windows_codecs.c: its gzip (zlib,
        # which CPython's zlib module links too), snappy and lz4 batches, and pass 1's payloads kept for pass 2
        sources=["kcompact/cleaner/round/_windows.c", "kcompact/cleaner/round/_windows_zstd.c",
                 "kcompact/cleaner/round/_windows_codecs.c", f"{ZSTD}/zstd.c"],
        depends=[*COMMON, f"{SCAN}/walk.h", f"{XXHASH}/xxhash.h", "kcompact/cleaner/round/_windows_zstd.h",
                 "kcompact/cleaner/round/_windows_codecs.h", f"{ZSTD}/zstd.h"],
        include_dirs=[*INCLUDE_DIRS, ZSTD],
        libraries=["z"],
        extra_compile_args=ZSTD_ARGS,
        optional=True,
    ),
]

setup(ext_modules=EXTENSIONS)
