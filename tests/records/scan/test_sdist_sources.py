"""The C extensions build from an sdist: every header their sources ``#include "…"`` is declared.

setuptools (>= 65; pyproject.toml asks for >= 77) puts an ``Extension``'s ``depends`` inside the
project into the sdist along with its ``sources`` — kcompact has no MANIFEST.in — so a header missing
from ``depends`` is missing from the sdist, and as the extension is ``optional=True`` a build from it
would silently install the pure-Python scans instead.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path
from typing import Any

import pytest
import setuptools

from tests.conftest import REPO_ROOT


def extensions(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The ``ext_modules`` setup.py passes to ``setuptools.setup`` (without running a build)."""
    seen: dict[str, Any] = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: seen.update(kwargs))
    monkeypatch.chdir(REPO_ROOT)
    runpy.run_path(str(REPO_ROOT / "setup.py"), run_name="__main__")
    return list(seen["ext_modules"])


def local_includes(source: Path, include_dirs: list[str]) -> set[Path]:
    """The files ``#include "…"`` names in ``source``, and theirs, relative to the repository: each
    found as the compiler finds it, beside the including file or else in an ``include_dirs`` entry."""
    found: set[Path] = set()
    pending = [source]
    while pending:
        current = pending.pop()
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', current.read_text(), re.MULTILINE):
            places = [current.parent, *(REPO_ROOT / folder for folder in include_dirs)]
            header = next((place / name for place in places if (place / name).is_file()), None)
            assert header is not None, f"{current}: {name} is in no include directory"
            header = header.resolve()
            if header not in found:
                found.add(header)
                pending.append(header)
    return {header.relative_to(REPO_ROOT) for header in found}


def test_every_included_header_is_declared_so_the_sdist_holds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    built = extensions(monkeypatch)
    assert built
    for extension in built:
        included = set().union(*(local_includes(REPO_ROOT / source, extension.include_dirs)
                                  for source in extension.sources))
        assert included, f"{extension.name}: expected the shared common.h at least"
        declared = {Path(path) for path in [*extension.sources, *extension.depends]}
        assert sorted(map(str, included - declared)) == [], extension.name
