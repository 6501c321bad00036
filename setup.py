"""Build script for kcompact's one compiled part; every other setting is in pyproject.toml.

Why a setup.py: pyproject.toml cannot declare a C extension for setuptools. The extension
``kcompact.records.scan._accel`` (kcompact/records/scan/_accel.c and _legacy.c, plain CPython C API) speeds up the
cleaner's record scans and rebuild; it is ``optional=True``, so where there is no C compiler the
build prints a warning and the install goes on with the pure-Python code, which stays the
reference (kcompact/records/scan/accel.py picks whichever is there).
"""

from __future__ import annotations

from setuptools import Extension, setup

ACCEL = Extension(
    "kcompact.records.scan._accel",
    # _legacy.c: the walk of legacy (magic 0/1) entries, registered in _accel.c's method table
    sources=["kcompact/records/scan/_accel.c", "kcompact/records/scan/_legacy.c"],
    depends=["kcompact/records/scan/xxhash.h", "kcompact/records/scan/_legacy.h"],  # vendored xxHash 0.8 (BSD 2-Clause): key digests
    optional=True,  # no compiler: warn and install the pure-Python package
)

setup(ext_modules=[ACCEL])
