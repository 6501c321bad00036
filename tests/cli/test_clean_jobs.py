"""``kcompact clean LOG_DIR --jobs``: worker processes change neither the report nor the bytes, a
corrupt partition fails alone, and a bad ``--jobs`` is refused before anything is touched."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from tests.cleaner.logdir.test_run_jobs import (
    CORRUPT,
    NOW,
    copy_of,
    digest,
    make_log_dir,
    refuse_large_pools,
)


def run(*args: str | Path | int) -> Result:
    """``kcompact clean`` with ``--config cleanup.policy=compact`` (the log dir has no metadata log)."""
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})
    return runner.invoke(cli, ["clean", "--config", "cleanup.policy=compact", *map(str, args)])


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_log_dir(tmp_path_factory.mktemp("template") / "logdir")


def without_timings(stdout: str, root: Path) -> Any:
    report = json.loads(stdout.replace(str(root), "<root>"))
    for result in report["results"]:
        result.pop("elapsed_s")
    return report


def test_json_report_and_bytes_are_the_same_with_two_jobs(template: Path, tmp_path: Path) -> None:
    one, two = copy_of(template, tmp_path / "one"), copy_of(template, tmp_path / "two")
    serial = run(one, "--now-ms", NOW, "--json", "--jobs", "1")
    pooled = run(two, "--now-ms", NOW, "--json", "--jobs", "2")
    assert (serial.exit_code, pooled.exit_code) == (2, 2)  # the corrupt partition failed
    assert without_timings(pooled.stdout, two.parent) == without_timings(serial.stdout, one.parent)
    assert digest(two) == digest(one)
    report = without_timings(pooled.stdout, two.parent)
    assert [f["partition_dir"] for f in report["failures"]] == [f"<root>/logdir/{CORRUPT}"]
    assert [r["partition_dir"] for r in report["results"]] == [
        "<root>/logdir/events-0", "<root>/logdir/events-1", "<root>/logdir/orders-0", "<root>/logdir/orders-2"]
    assert digest(two / CORRUPT) == digest(template / CORRUPT)


def normalized(text: str, root: Path) -> str:
    text = text.replace(str(root), "<root>")
    text = re.sub(r" in \d+\.\d\d s \(\d+(\.\d)? (B|KiB|MiB|GiB)/s\)", " in <t> s (<r>/s)", text)
    return "".join(line.rstrip() + "\n" for line in text.splitlines())


def test_text_report_is_the_same_with_two_jobs(template: Path, tmp_path: Path) -> None:
    one, auto = copy_of(template, tmp_path / "one"), copy_of(template, tmp_path / "two")
    serial = run(one, "--now-ms", NOW, "--jobs", "1")
    pooled = run(auto, "--now-ms", NOW, "--jobs", "2")
    assert normalized(pooled.stdout, auto.parent) == normalized(serial.stdout, one.parent)
    assert normalized(pooled.stderr, auto.parent) == normalized(serial.stderr, one.parent)
    assert normalized(pooled.stdout, auto.parent).endswith(
        "4 partitions cleaned, 0 had nothing to clean, 0 skipped, 1 failed; 11.7 KiB read, 832 B written\n")
    assert f"kcompact: error: <root>/logdir/{CORRUPT}/00000000000000000000.log at position 0: record 0 " \
           "length out of range" in normalized(pooled.stderr, auto.parent)


def test_auto_jobs_is_the_default(template: Path, tmp_path: Path) -> None:
    default, auto = copy_of(template, tmp_path / "default"), copy_of(template, tmp_path / "auto")
    plain = run(default, "--now-ms", NOW, "--json")
    spelled = run(auto, "--now-ms", NOW, "--json", "--jobs", "AUTO")
    assert without_timings(spelled.stdout, auto.parent) == without_timings(plain.stdout, default.parent)
    assert digest(auto) == digest(default)


@pytest.mark.parametrize("value", ["0", "-1", "two", ""])
def test_bad_jobs_is_refused_before_anything_is_touched(template: Path, tmp_path: Path, value: str) -> None:
    log_dir = copy_of(template, tmp_path / "bad")
    before = digest(log_dir)
    result = run(log_dir, "--jobs", value)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines()[-1] == (
        "Error: Invalid value for '--jobs': a number of worker processes; expected 1 or more, or "
        f"'auto', found {value!r}")
    assert digest(log_dir) == before


CLAMPED = ("--jobs 100000: 2 worker processes at a time, as many as the 5 partitions to clean and the 2 "
           "usable cores allow")


def test_a_huge_jobs_is_clamped_and_said_once(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_json, as_text = copy_of(template, tmp_path / "json"), copy_of(template, tmp_path / "text")
    sizes = refuse_large_pools(monkeypatch, cores=2)
    compact = ("--config", "cleanup.policy=compact")
    report = run(as_json, "--now-ms", NOW, "--jobs", "100000", "--json", *compact)
    text = run(as_text, "--now-ms", NOW, "--jobs", "100000", *compact)
    assert (report.exit_code, text.exit_code, sizes) == (2, 2, [2, 2])  # the corrupt partition failed
    assert json.loads(report.stdout)["notes"][-1] == CLAMPED
    assert text.stderr.count("--jobs 100000") == 1
    assert f"kcompact: warning: {CLAMPED}\n" in text.stderr
    assert digest(as_json) == digest(as_text)


def test_help_describes_jobs() -> None:
    result = CliRunner(env={"COLUMNS": "100"}).invoke(cli, ["clean", "--help"])
    assert result.exit_code == 0
    assert "--jobs N|auto" in result.stdout
    assert "Default auto: one per core once there is enough to do (about 80 ms of work: 20 MiB, counting " \
           "1.5 MiB per partition), else 1. A larger N than the usable cores or the work (partitions; a " \
           "partition's segment ranges) is clamped to them, and the report says so." in " ".join(result.stdout.split())


def test_progress_bar_starts_its_thread_only_at_the_first_update(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker processes are forked before any progress arrives: no rich refresh thread may exist then."""
    import io
    import threading

    from rich.console import Console

    from kcompact.cli import render
    from kcompact.cli.progress_view import progress_bar

    terminal = Console(file=io.StringIO(), force_terminal=True, width=80)
    monkeypatch.setattr(render, "err_console", lambda: terminal)
    monkeypatch.setattr(render, "may_be_terminal", lambda stream: True)  # stderr is a terminal
    threads = threading.active_count()
    with progress_bar(enabled=True) as update:
        assert update is not None and threading.active_count() == threads
        update("orders-0", 10, 100)
        assert threading.active_count() == threads + 1
    for thread in threading.enumerate():  # the bar's refresh thread was told to stop; let it end
        if thread is not threading.current_thread():
            thread.join(timeout=5)
    assert threading.active_count() == threads
    assert "cleaning orders-0" in terminal.file.getvalue()  # type: ignore[attr-defined]


def test_no_progress_callback_when_stderr_is_not_a_terminal() -> None:
    from kcompact.cli.progress_view import progress_bar

    with progress_bar(enabled=True) as update:  # pytest captures stderr: not a terminal
        assert update is None
