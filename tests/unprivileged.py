"""Run kcompact in a child process that file modes apply to, even when the tests run as root.

Root ignores file modes (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so a ``chmod 000`` segment or a
read-only partition directory stops nothing when the suite runs as root, as it does in CI. Permission
tests therefore run the command in a subprocess: as root through
``setpriv --bounding-set=-dac_override,-dac_read_search --inh-caps=-all``, which drops those two
capabilities for the child (a root process keeps only the capabilities in its bounding set across
``execve``): it stays uid 0, but a mode the owner lacks now stops it, as it stops a broker's user; as any
other user, plainly. Where neither works (root without ``setpriv``, or a sandbox that forbids changing the
bounding set) the test is skipped with the reason. A probe reads a ``chmod 000`` file first, so a
child that could still read it never passes for an unprivileged one.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

DROP_DAC = ["--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all"]
TIMEOUT_S = 120


@functools.cache
def _prefix() -> tuple[tuple[str, ...], str | None]:
    """The command prefix that drops the DAC capabilities, or None with the reason it cannot."""
    if os.geteuid() != 0:
        return (), None
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return (), "running as root and setpriv (util-linux) is not installed: file modes cannot be tested"
    prefix = (setpriv, *DROP_DAC)
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "unreadable"
        probe.write_bytes(b"x")
        probe.chmod(0)
        try:
            done = subprocess.run([*prefix, sys.executable, "-c", f"open({str(probe)!r}).read()"],
                                  capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except OSError as err:
            return (), f"running as root and setpriv cannot start: {err}"
    if done.returncode == 0:
        return (), "running as root and setpriv did not drop CAP_DAC_OVERRIDE: file modes cannot be tested"
    if "PermissionError" not in done.stderr:
        return (), f"running as root and setpriv cannot drop capabilities here: {done.stderr.strip()[-200:]}"
    return prefix, None


def python_argv(*args: str) -> list[str]:
    """The argv of ``python ARGS`` in a child that file modes apply to; skips the test where impossible."""
    prefix, why = _prefix()
    if why is not None:
        pytest.skip(why)
    return [*prefix, sys.executable, *args]


def run_python(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGS`` (``-c CODE …`` or ``-m MODULE …``) from the repository, file modes applying.

    Returns:
        The finished process (text stdout and stderr captured; the exit code is not checked).
    """
    return subprocess.run(python_argv(*args), cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)


def run_kcompact(*args: str) -> subprocess.CompletedProcess[str]:
    """``kcompact ARGS`` in a child process that file modes apply to (see :func:`run_python`)."""
    return run_python("-m", "kcompact", *args)


@dataclass(frozen=True)
class Outcome:
    """What one ``kcompact`` invocation of :func:`run_kcompact_batch` did."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str
    traceback: str | None  # an exception that escaped the command (a kcompact bug: exit code 1)


_BATCH_DRIVER = """
import json, sys, traceback
from click.testing import CliRunner
from kcompact.cli.main import cli
out = []
for argv in json.load(sys.stdin):
    result = CliRunner().invoke(cli, argv, catch_exceptions=True)
    escaped = result.exception is not None and not isinstance(result.exception, SystemExit)
    trace = "".join(traceback.format_exception(result.exception)) if escaped else None
    out.append([argv, 1 if escaped else result.exit_code, result.stdout, result.stderr, trace])
json.dump(out, sys.stdout)
"""


def run_kcompact_batch(argvs: Sequence[Sequence[str]]) -> list[Outcome]:
    """Run many ``kcompact`` command lines in ONE child process that file modes apply to.

    Starting Python and importing kcompact costs about 0.3 s a process; a test of many damaged copies
    prepares them all, then runs every command line here, each through click as ``kcompact`` runs it.

    Args:
        argvs: the command lines, without the ``kcompact`` (each works on its own copy of the data).

    Returns:
        One :class:`Outcome` per command line, in order.
    """
    argv = python_argv("-c", _BATCH_DRIVER)
    done = subprocess.run(argv, cwd=REPO_ROOT, input=json.dumps([list(a) for a in argvs]),
                          capture_output=True, text=True, timeout=TIMEOUT_S * 4, check=False)
    assert done.returncode == 0, done.stderr
    return [Outcome(tuple(a), code, out, err, trace) for a, code, out, err, trace in json.loads(done.stdout)]
