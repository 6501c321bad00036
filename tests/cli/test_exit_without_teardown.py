"""``kcompact clean`` ends its process without the interpreter's teardown once the command has returned
(``options.end_without_teardown``), with its output, exit code and every file of the partition as a normal exit
leaves them; other commands end normally. Each run is a real process started as the console entry starts it;
an exit handler registered before it tells whether the interpreter was torn down."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import PartitionBuilder, read_all_records

_ENTRY = """
import atexit, sys
from pathlib import Path
marker = Path(sys.argv[1])
atexit.register(lambda: marker.write_text("torn down"))
from kcompact.cli.main import main
sys.argv = ["kcompact", *sys.argv[2:]]
main()
"""
NOW = str(1 << 45)


def kcompact(marker: Path, *args: str | Path, pipe_to: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """The console entry run on ``args`` in a fresh process; ``marker`` is written if its exit handlers run."""
    cwd = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-c", _ENTRY, str(marker), *map(str, args)]
    if pipe_to is None:
        return subprocess.run(command, capture_output=True, text=True, cwd=cwd, check=False)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, text=True) as proc:
        reader = subprocess.run(pipe_to, stdin=proc.stdout, capture_output=True, text=True, check=True)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        stderr = proc.stderr.read()
        return subprocess.CompletedProcess(command, proc.wait(), reader.stdout, stderr)


def compacted(tmp_path: Path) -> Path:
    b = PartitionBuilder("orders")
    for round_ in range(3):
        b.batch([(b"k%d" % i, b"v%d" % round_) for i in range(40)]).roll()
    b.batch([(b"k0", b"last")])
    return b.write(tmp_path / "logdir")


def test_a_clean_ends_without_teardown_its_report_whole_and_its_partition_cleaned(tmp_path: Path) -> None:
    part = compacted(tmp_path)
    marker = tmp_path / "marker"
    done = kcompact(marker, "clean", "--json", "--now-ms", NOW, "--config", "cleanup.policy=compact", part)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # the whole report: stdout was flushed before the end
    assert report["results"][0]["checkpoint_written"] is True
    assert not marker.exists()  # no teardown ran
    keys = [key or b"" for _offset, key, _value in read_all_records(part)]
    assert sorted(keys) == sorted([b"k%d" % i for i in range(40)] + [b"k0"])  # the cleaned keys, the active k0


def test_a_refused_clean_keeps_its_exit_code_and_its_error_line(tmp_path: Path) -> None:
    part = compacted(tmp_path)
    marker = tmp_path / "marker"
    done = kcompact(marker, "clean", "--json", "--now-ms", NOW, part)  # no policy known: refused, named alone
    assert done.returncode == 2
    assert done.stderr.startswith("kcompact: error: ") and "cleanup.policy" in done.stderr
    assert not marker.exists()


def test_a_clean_piped_to_a_reader_that_stops_early_still_exits_zero(tmp_path: Path) -> None:
    part = compacted(tmp_path)
    done = kcompact(tmp_path / "marker", "clean", "--json", "--now-ms", NOW, "--config", "cleanup.policy=compact",
                    part, pipe_to=["head", "-c", "1"])
    assert done.returncode == 0 and done.stdout == "{"
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here (not Linux)")
def test_output_left_unwritten_at_the_end_is_an_error_not_a_success() -> None:
    """What is still buffered when the process ends is written first; where it cannot be (a full disk under a
    redirected stdout: /dev/full refuses every write), the end says so and exits 2, not 0."""
    ending = ("import sys\nfrom kcompact.cli.main import _end_now\n"
              "sys.stdout = open('/dev/full', 'w', buffering=8192)\nprint('report', end='')\n_end_now(0)\n")
    done = subprocess.run([sys.executable, "-c", ending], stderr=subprocess.PIPE, text=True, check=False,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 2
    assert done.stderr == "kcompact: error: cannot write the output (No space left on device)\n"


def test_other_commands_end_with_the_interpreters_teardown(tmp_path: Path) -> None:
    part = compacted(tmp_path)
    marker = tmp_path / "marker"
    done = kcompact(marker, "inspect", "dirty-ratio", "--json", "--now-ms", NOW, part)
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "torn down"
