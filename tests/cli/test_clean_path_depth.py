"""The path of ``kcompact clean`` stays short and straight: how deep the stack is when the first
``.cleaned`` segment is written, and how often ``cleaner-offset-checkpoint`` is parsed.

Kafka's own path from ``LogCleaner`` to the first write (``Cleaner.doClean`` → ``cleanSegments`` →
``cleanInto``) is about 9 frames; kcompact's, from its console entry point, may hold at most 11 of its
own (the CLI's 4, the log-dir driver, the round's entry, its locked body, its compaction step, its
passes, the group's pass 2, the writer).
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

# ``sys.setprofile`` sees the call of ``open`` but not its arguments; the ``open`` audit event names the
# file and the mode, and is raised inside that call, with the caller's frames on the stack.
FIRST_CLEANED_WRITE = """
import os, sys
import kcompact
from kcompact.cli.main import main
package = os.path.dirname(kcompact.__file__) + os.sep
found = []
def hook(event, args):
    if (event == "open" and not found and str(args[0]).endswith(".cleaned") and isinstance(args[1], str)
            and set(args[1]) & set("wxa")):
        frame, names = sys._getframe(1), []
        while frame is not None:
            if frame.f_code.co_filename.startswith(package):
                names.append(frame.f_code.co_name)
            frame = frame.f_back
        found.append(names)
sys.addaudithook(hook)
sys.argv = ["kcompact", *sys.argv[1:]]
try:
    main()
finally:
    sys.stderr.write(f"frames: {len(found[0]) if found else -1} {list(reversed(found[0])) if found else []}\\n")
"""


def test_the_first_cleaned_write_is_at_most_eleven_kcompact_frames_deep(tmp_path: Path) -> None:
    log_dir = copy_tree_writable(PROJECT_FIXTURES / "sample-logdir", tmp_path / "sample-logdir")
    argv = [sys.executable, "-c", FIRST_CLEANED_WRITE, "clean", str(log_dir / "orders-0")]
    proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)

    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.startswith("frames: "))
    depth = int(line.split()[1])
    assert 0 < depth <= MAX_FRAMES, line


def test_a_clean_parses_the_cleaner_checkpoint_once_and_once_more_to_update_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read once (every later lookup is served from that parse), and once more under the checkpoint's
    lock, as the read-modify-write that keeps the lines other processes wrote meanwhile."""
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
    assert len(parses) == 2, parses
