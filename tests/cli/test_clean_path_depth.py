"""The path of ``kcompact clean`` stays short and straight: how deep the stack is when the first bytes of
a ``.cleaned`` segment are written, and how often ``cleaner-offset-checkpoint`` is parsed.

Kafka 4.1's own path from its cleaner thread to the first write (``ShutdownableThread.run`` →
``CleanerThread.doWork`` → ``tryCleanFilthiestLog`` → ``cleanFilthiestLog`` → ``cleanLog`` → ``Cleaner.clean`` →
``doClean`` → ``cleanSegments`` → ``cleanInto`` → ``LogSegment.append`` → ``FileRecords.append``) is about 12
frames; kcompact's, from its console entry point, may hold at most 11 of its own, for a partition named alone
and for a log dir (the CLI's 4, the log-dir driver, the log dir's loop, the round's entry, its locked body,
its passes, the group's pass 2, the writer).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.segment import checkpoint
from tests.conftest import PROJECT_FIXTURES, REPO_ROOT, copy_tree_writable

MAX_FRAMES = 11

# ``sys.setprofile`` sees each call of a C function with the function itself: the ``write`` of a file
# object bound to a ``.cleaned`` file is the first write of its bytes, with the caller's frames on the stack.
FIRST_CLEANED_WRITE = """
import os, sys
import kcompact
from kcompact.cli.main import main
package = os.path.dirname(kcompact.__file__) + os.sep
found = []
def profile(frame, event, arg):
    if (found or event != "c_call" or getattr(arg, "__name__", None) != "write"
            or not str(getattr(getattr(arg, "__self__", None), "name", "")).endswith(".cleaned")):
        return
    names = []
    while frame is not None:
        if frame.f_code.co_filename.startswith(package):
            names.append(frame.f_code.co_name)
        frame = frame.f_back
    found.append(names)
def report():
    sys.setprofile(None)
    sys.stderr.write(f"frames: {len(found[0]) if found else -1} {list(reversed(found[0])) if found else []}\\n")
    sys.stderr.flush()
me, end = os.getpid(), os._exit
def reported_end(code):  # a clean ends without teardown (options.end_without_teardown): report there
    if os.getpid() == me:  # not a forked worker's end
        report()
    end(code)
os._exit = reported_end
sys.setprofile(profile)
sys.argv = ["kcompact", *sys.argv[1:]]
try:
    main()
finally:
    report()
"""


@pytest.mark.parametrize("target", ["orders-0", "."], ids=["partition", "log-dir"])
def test_the_first_cleaned_write_is_at_most_eleven_kcompact_frames_deep(tmp_path: Path, target: str) -> None:
    log_dir = copy_tree_writable(PROJECT_FIXTURES / "sample-logdir", tmp_path / "sample-logdir")
    argv = [sys.executable, "-c", FIRST_CLEANED_WRITE, "clean", str((log_dir / target).resolve())]
    proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)

    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.startswith("frames: "))
    depth = int(line.split()[1])
    assert 0 < depth <= MAX_FRAMES, line
    assert line.split()[-1] == "'append_run']", line  # the writer's bytes, whichever walk made them


def test_a_clean_parses_the_cleaner_checkpoint_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read once: every later lookup is served from that parse, and so is the read-modify-write under the
    checkpoint's lock while the file is the one parsed (same inode, size and mtime; a rewrite by another
    process is a new file, read again: tests/segment/test_checkpoint.py's concurrent updaters)."""
    log_dir = copy_tree_writable(PROJECT_FIXTURES / "sample-logdir", tmp_path / "sample-logdir")
    part = log_dir / "orders-0"
    runner = CliRunner()
    assert runner.invoke(cli, ["clean", str(part)], catch_exceptions=False).exit_code == 0
    parses: list[Path] = []
    read = checkpoint.read_offset_checkpoint

    def counted(path: str | Path) -> dict[tuple[str, int], int]:
        if Path(path).name == "cleaner-offset-checkpoint":
            parses.append(Path(path))
        return read(path)

    monkeypatch.setattr(checkpoint, "read_offset_checkpoint", counted)
    monkeypatch.setattr(checkpoint, "_CHECKPOINT_CACHE", {})
    again = runner.invoke(cli, ["clean", "--from-start", "--json", str(part)], catch_exceptions=False)

    assert again.exit_code == 0 and '"checkpoint_written": true' in again.output
    assert len(parses) == 1, parses
