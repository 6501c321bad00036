"""``kcompact repair`` on the command line: report, exit codes, JSON, undo, usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from tests.cleaner.logdir.test_run_config import keyless_partition
from tests.repair.support import batch_positions, build_partition, partition_digest, patch

LOG0 = "00000000000000000000.log"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner(env={"COLUMNS": "80"}).invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def damaged(tmp_path: Path) -> tuple[Path, int]:
    part = build_partition(tmp_path / "logdir", segments=1, batches=5)
    position, _size = batch_positions(part / LOG0)[2]
    patch(part / LOG0, position + 8, ">i", 5)  # a size field Kafka refuses: below 14
    return part, position


def test_help_names_every_option() -> None:
    code, out, _err = run("repair", "--help")
    assert code == 0
    for option in ("--dry-run", "--json", "--backup-dir", "--clean", "--undo", "--config"):
        assert option in out


def test_dry_run_report_whole_output(tmp_path: Path) -> None:
    part, position = damaged(tmp_path)
    code, out, _err = run("repair", "--dry-run", str(part))
    assert code == 2
    log = part / LOG0
    assert out.replace(str(part), "PART").splitlines() == [
        "PART: 1 problem found; the broker's cleaner would mark it uncleanable",
        (f"  [corrupt-batch] PART/{LOG0} at position {position}: wrong batch length; expected "
        f"181, found 5 (a field outside the CRC; the batch is otherwise intact)"),
        "      impact: breaks the broker and its cleaner",
        ("      uncleanable: the cleaner cannot step over a broken frame or header "
        "(CorruptRecordException / InvalidRecordException), so the broker marks the partition "
        "uncleanable and never cleans it again until it restarts"),
        (f"      broker: log recovery stops at the first bad entry: it truncates this segment at or "
        f"before position {position} and deletes the 1 later segment"),
        ("      repair: restore the field: the batch passes its CRC and fits the offsets around it "
        "with offsets 8..11"),
        "plan (dry run, nothing written):",
        (f"  - PART/{LOG0} at position {position}: restore the field: the batch passes its CRC and "
        "fits the offsets around it with offsets 8..11"),
        "would give up: nothing (every batch that passes its CRC stays in the log)",
    ]
    assert log.exists()


def test_repair_json_then_undo(tmp_path: Path) -> None:
    part, position = damaged(tmp_path)
    before = partition_digest(part)
    code, out, _err = run("repair", "--json", str(part))
    assert code == 0
    report = json.loads(out)
    assert report["uncleanable"] is True and report["remaining"] == []
    assert [(f["kind"], f["position"]) for f in report["findings"]] == [("corrupt-batch", position)]
    assert report["actions"] == [(f"rewrote segment {LOG0} (kept 5 batches, quarantined 0 damaged "
                                 "regions; indexes rebuilt)")]
    code, out, _err = run("repair", "--undo", report["backup_dir"])
    assert code == 0 and "restore 3 files" in out
    assert partition_digest(part) == before


def test_sound_partition_exits_0_and_writes_nothing(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir", segments=1, batches=5)
    before = partition_digest(part)
    code, out, _err = run("repair", str(part))
    assert code == 0 and "nothing left to repair" in out
    assert partition_digest(part) == before


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    part, _position = damaged(tmp_path)
    assert run("repair")[0] == 2
    code, _out, err = run("repair", str(part), "--undo", str(tmp_path))
    assert code == 2 and "--undo takes a BACKUP_DIR only" in err
    code, _out, err = run("repair", "--undo", str(tmp_path))
    assert code == 2 and "not a kcompact repair backup" in err


def test_backup_inside_the_log_dir_is_refused_with_one_line(tmp_path: Path) -> None:
    part, _position = damaged(tmp_path)
    code, _out, err = run("repair", str(part), "--backup-dir", str(part.parent / "bk"))
    assert code == 2
    assert err.startswith("kcompact: error: ") and "must not be inside the log dir" in err
    assert len(err.strip().splitlines()) == 1


def test_clean_after_repair_compacts_only_a_partition_known_to_be_compacted(tmp_path: Path) -> None:
    """``repair --clean`` cleans as ``kcompact clean`` does: a partition whose cleanup.policy no source
    sets is repaired but not compacted (exit 2, the reason on stderr) unless --assume-compact says so."""
    part, _position = damaged(tmp_path)
    code, _out, err = run("repair", "--clean", "--now-ms", "1800000000000", str(part))
    assert code == 2
    assert f"kcompact: error: clean failed: {part}: cleanup.policy is not known (no KRaft metadata log " in err
    assert "if the topic is compacted, give --config cleanup.policy=compact or --assume-compact to compact it" in err
    repaired = partition_digest(part)
    code, out, err = run("repair", "--clean", "--assume-compact", "--now-ms", "1800000000000", "--json",
                          str(part))
    assert code == 0 and json.loads(out)["clean"]["results"][0]["end_offset"] is not None
    assert partition_digest(part) != repaired


def test_clean_after_repair_needs_the_acknowledgement_to_delete_a_mostly_keyless_partition(tmp_path: Path) -> None:
    """``repair --clean`` guards keyless records as ``clean`` does: even with --config cleanup.policy=compact
    the clean refuses a partition whose records all lack a key, saying how many, unless --allow-keyless-loss."""
    part = keyless_partition(tmp_path / "logdir")
    before = partition_digest(part)
    code, _out, err = run("repair", "--clean", "--config", "cleanup.policy=compact", "--now-ms", "1800000000000",
                          str(part))
    assert code == 2 and "kcompact clean" not in err
    assert (f"kcompact: error: clean failed: {part}: cleanup.policy=compact (--config), but 9 of the 9 records "
            "of the partition have no key") in err
    assert "give --allow-keyless-loss to compact it anyway, deleting them" in err
    assert partition_digest(part) == before
    code, out, _err = run("repair", "--clean", "--config", "cleanup.policy=compact", "--allow-keyless-loss",
                          "--now-ms", "1800000000000", "--json", str(part))
    assert code == 0 and json.loads(out)["clean"]["results"][0]["end_offset"] is not None
    assert partition_digest(part) != before


def test_a_failed_clean_that_changed_nothing_keeps_no_backup(tmp_path: Path) -> None:
    part = keyless_partition(tmp_path / "logdir")
    before = sorted(p.name for p in tmp_path.iterdir())

    code, out, err = run("repair", "--clean", "--config", "cleanup.policy=compact", "--now-ms", "1800000000000",
                         "--json", str(part))

    assert code == 2
    report = json.loads(out)
    assert report["backup_dir"] is None
    assert report["clean_error"].endswith("(nothing was changed; no backup kept)")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no <log dir>.kcompact-backup
    code, out, err = run("repair", "--clean", "--config", "cleanup.policy=compact", "--now-ms", "1800000000000",
                         str(part))
    assert code == 2 and "backup" not in out
    assert err.strip().endswith("(nothing was changed; no backup kept)")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_failed_clean_after_a_repair_names_the_backup_of_its_changes(tmp_path: Path) -> None:
    part, _position = damaged(tmp_path)
    backup = tmp_path / "bk"

    code, _out, err = run("repair", "--clean", "--now-ms", "1800000000000", "--backup-dir", str(backup),
                          str(part))

    assert code == 2
    assert "Changed before that: rewrote segment" in err
    assert f"backed up in {backup} (undo: kcompact repair --undo {backup})" in err
    code, _out, _err = run("repair", "--undo", str(backup))
    assert code == 0


def test_a_failed_clean_keeps_the_backup_of_a_segment_rewritten_at_its_size_and_mtime(tmp_path: Path) -> None:
    # A wrong batch length is restored in place: same size, and the rewrite is stamped with the old .log's
    # mtime, which its indexes already shared (as Kafka's cleaner leaves them). A failure after that is not
    # "nothing changed": the original bytes stay backed up, and undo brings them back.
    import hashlib
    import os

    part = keyless_partition(tmp_path / "logdir")
    log = part / LOG0
    position, _size = batch_positions(log)[0]
    patch(log, position + 8, ">i", 5)
    mtime = log.stat().st_mtime_ns
    for path in part.glob("00000000000000000000.*"):
        os.utime(path, ns=(mtime, mtime))
    damaged_bytes = hashlib.sha256(log.read_bytes()).hexdigest()

    code, out, _err = run("repair", "--clean", "--config", "cleanup.policy=compact", "--now-ms", "1800000000000",
                          "--json", str(part))

    assert code == 2
    report = json.loads(out)
    assert (log.stat().st_size, log.stat().st_mtime_ns) == (len(log.read_bytes()), mtime)
    assert hashlib.sha256(log.read_bytes()).hexdigest() != damaged_bytes  # the repair did rewrite it
    assert report["backup_dir"] is not None
    assert report["clean_error"].endswith(f"undo: kcompact repair --undo {report['backup_dir']})")
    code, _out, _err = run("repair", "--undo", report["backup_dir"])
    assert code == 0
    assert hashlib.sha256(log.read_bytes()).hexdigest() == damaged_bytes


def test_a_repair_failing_before_its_first_change_keeps_no_backup(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from kcompact.errors import CorruptDataError
    from kcompact.repair import repair as repair_module

    part, _position = damaged(tmp_path)
    before = partition_digest(part)

    def refuse(*_args: object) -> None:
        raise CorruptDataError("the rewritten segment does not read back", path=part / LOG0)

    monkeypatch.setattr(repair_module, "check_cleaned_segment", refuse)
    code, _out, err = run("repair", "--backup-dir", str(tmp_path / "bk"), str(part))

    assert code == 2
    assert err == (f"kcompact: error: {part / LOG0}: the rewritten segment does not read back (nothing was "
                   "changed; no backup kept)\n")
    assert partition_digest(part) == before
    assert not (tmp_path / "bk").exists()


@pytest.mark.parametrize("whole_log_dir", [False, True], ids=["partition", "log-dir"])
def test_a_segment_linked_from_outside_the_log_dir_is_refused_in_one_line(
        tmp_path: Path, whole_log_dir: bool) -> None:
    """The backup saves files by their path in the log dir and the rewrite renames over the link: refused
    before any backup is made, the link and its damaged target as they were."""
    part, _position = damaged(tmp_path)
    outside = tmp_path / "elsewhere" / LOG0
    outside.parent.mkdir()
    (part / LOG0).rename(outside)
    (part / LOG0).symlink_to(outside)
    before, target_before = partition_digest(part), outside.read_bytes()

    code, out, err = run("repair", *([str(part.parent), "--json"] if whole_log_dir else [str(part)]))

    assert code == 2
    message = (f"{part / LOG0}: a symbolic link (to {outside}); repair backs up and rewrites the files of "
               "the log dir in place and would replace the link by a plain file; put the file itself where "
               "the link is, or repair a copy of the log dir; nothing was changed")
    if whole_log_dir:
        assert [row["error"] for row in json.loads(out)["rows"]] == [message]
    else:
        assert err.splitlines() == [f"kcompact: error: {message}"]
    assert (part / LOG0).is_symlink() and outside.read_bytes() == target_before
    assert partition_digest(part) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "logdir"]  # no backup directory


UNDO_USAGE = ["Usage: kcompact repair [OPTIONS] PARTITION_DIR|LOG_DIR...",
              "   or: kcompact repair --undo BACKUP_DIR [--dry-run] [--json]"]


def kcompact(*args: str) -> tuple[int, str, str]:
    """``run`` as the installed ``kcompact`` script names itself in usage lines."""
    result = CliRunner(env={"COLUMNS": "80"}).invoke(cli, list(args), prog_name="kcompact",
                                                     catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_undo_with_a_partition_says_its_one_form_and_the_usage_shows_it(tmp_path: Path) -> None:
    part, _position = damaged(tmp_path)
    code, _out, _err = run("repair", "--json", str(part), "--backup-dir", str(tmp_path / "bk"))
    assert code == 0
    before = partition_digest(part)

    code, _out, err = kcompact("repair", str(part), "--undo", str(tmp_path / "bk"))

    assert code == 2
    lines = err.splitlines()
    assert lines[:2] == UNDO_USAGE
    assert lines[-1] == ("Error: --undo takes a BACKUP_DIR only (its manifest names the partition it "
                         "puts back), with --dry-run or --json; found PARTITION_DIR|LOG_DIR")
    assert partition_digest(part) == before
    code, _out, err = kcompact("repair", "--undo", str(tmp_path / "bk"), "--clean", "--config", "a=b")
    assert code == 2 and err.splitlines()[-1].endswith("; found --clean, --config")


def test_repair_help_shows_both_forms_and_what_undo_takes() -> None:
    code, out, _err = kcompact("repair", "--help")

    assert code == 0
    assert out.splitlines()[:2] == UNDO_USAGE
    flat = " ".join(out.split())
    assert ("--undo BACKUP_DIR Put back, byte for byte, the partition a repair changed, from the backup "
            "it printed (the manifest names the partition): alone, or with --dry-run or --json") in flat
