"""``kcompact repair --clean`` takes clean's config sources (``--server-properties``, ``--metadata-dir``) and
its replica fence (``--replica-dirs``, ``--safe-offset``); the options only the clean uses are refused
without ``--clean``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.segment.checkpoint import update_offset_checkpoint
from tests.builders import PartitionBuilder, read_all_records
from tests.config.test_effective import snapshot_without_its_tail
from tests.conftest import PROJECT_FIXTURES
from tests.log.rules.test_fence import DAY, NOW, _tombstones
from tests.repair.support import build_partition, partition_digest
from tests.repair.test_valid_indexes import partition as indexed_partition

COMPACT = ("--config", "cleanup.policy=compact")


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner(env={"COLUMNS": "80"}).invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def tree(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_clean_reads_the_policy_from_a_metadata_log_dir_of_its_own(tmp_path: Path) -> None:
    """The sample's KRaft metadata log (orders is compacted) moved to a metadata.log.dir of its own: without
    --metadata-dir the policy is unknown and the clean refuses; with it the partition is compacted."""
    log_dir = Path(shutil.copytree(PROJECT_FIXTURES / "sample-logdir", tmp_path / "logdir"))
    shutil.move(log_dir / "__cluster_metadata-0", tmp_path / "metadata" / "__cluster_metadata-0")
    part = log_dir / "orders-0"

    code, _out, err = run("repair", "--clean", str(part))
    assert code == 2 and f"clean failed: {part}: cleanup.policy is not known" in err

    code, out, err = run("repair", "--clean", "--metadata-dir", str(tmp_path / "metadata"), "--json", str(part))
    assert (code, err) == (0, "")
    [cleaned] = json.loads(out)["clean"]["results"]
    assert cleaned["end_offset"] == 142
    keys = [k for _o, k, _v in read_all_records(part)[:-1] if k is not None]
    assert len(keys) == len(set(keys))  # one record per key left in the cleaned section


def test_clean_refuses_a_policy_only_last_known_from_a_snapshot(tmp_path: Path) -> None:
    """The sample's metadata log as a snapshot whose log after it is gone: orders' compact is only last
    known, so the clean refuses it as an unknown policy, and --assume-compact compacts it."""
    log_dir = Path(shutil.copytree(PROJECT_FIXTURES / "sample-logdir", tmp_path / "logdir"))
    last = snapshot_without_its_tail(log_dir / "__cluster_metadata-0")
    part = log_dir / "orders-0"
    before = tree(part)

    code, _out, err = run("repair", "--clean", str(part))
    assert code == 2 and (f"clean failed: {part}: cleanup.policy is not known: compact (topic override, last "
                          f"known at metadata offset {last})") in err
    assert tree(part) == before

    code, out, _err = run("repair", "--clean", "--assume-compact", "--json", str(part))
    assert code == 0
    assert [r["end_offset"] for r in json.loads(out)["clean"]["results"]] == [142]


def test_the_repair_reads_index_interval_bytes_from_server_properties(tmp_path: Path) -> None:
    """Indexes written every 600 bytes differ from Kafka's default interval (informational); with the
    broker's log.index.interval.bytes=600 from --server-properties they are what Kafka would build."""
    part = indexed_partition(tmp_path, index_interval_bytes=600)
    props = tmp_path / "server.properties"
    props.write_text("log.index.interval.bytes=600\n")

    code, out, _err = run("repair", "--dry-run", "--json", str(part))
    assert code == 0 and {f["kind"] for f in json.loads(out)["findings"]} == {"index-differs"}
    code, out, _err = run("repair", "--dry-run", "--json", "--server-properties", str(props), str(part))
    assert code == 0 and json.loads(out)["findings"] == []


@pytest.mark.parametrize("source", ["--server-properties", "--metadata-dir"])
def test_a_named_source_that_cannot_be_read_stops_the_repair_before_any_change(tmp_path: Path, source: str) -> None:
    # Kafka's defaults stand in only for sources kcompact finds itself: one the user names is meant.
    part = indexed_partition(tmp_path, index_interval_bytes=600)
    before = partition_digest(part)
    if source == "--server-properties":
        named = tmp_path / "server.properties"
        named.write_text("log.index.interval.bytes=abc\n")
    else:
        named = tmp_path / "empty-metadata-dir"
        named.mkdir()

    for extra in ((), ("--clean", "--config", "cleanup.policy=compact")):
        code, out, err = run("repair", *extra, source, str(named), str(part))

        assert code == 2, out
        assert len(err.splitlines()) == 1 and err.startswith("kcompact: error: ")
        assert partition_digest(part) == before
        assert not list(tmp_path.glob("*.kcompact-backup"))


def stamped_tombstones(tmp_path: Path) -> Path:
    """a's tombstone at offset 2, its delete horizon stamped by a clean at NOW, the checkpoint back at 0 so
    the next clean re-reads the whole log (as after a lost cleaner checkpoint)."""
    part = _tombstones(tmp_path)
    code, _out, err = run("clean", *COMPACT, "--now-ms", str(NOW), str(part))
    assert code == 0, err
    update_offset_checkpoint(part.parent / "cleaner-offset-checkpoint", {("orders", 0): 0})
    return part


@pytest.mark.parametrize("fence, kept", [
    ((), False),
    (("--safe-offset", "2"), True),
    (("--replica-dirs", "follower"), True),
])
def test_clean_fences_the_tombstone_a_lagging_replica_lacks(
    tmp_path: Path, fence: tuple[str, ...], kept: bool
) -> None:
    part = stamped_tombstones(tmp_path)
    PartitionBuilder().batch([(b"a", b"1"), (b"b", b"1")]).write(tmp_path / "follower")  # fetched 0-1 only
    args = [str(tmp_path / a) if a == "follower" else a for a in fence]

    code, _out, err = run("repair", "--clean", *COMPACT, "--now-ms", str(NOW + 2 * DAY), *args, str(part))

    assert (code, err) == (0, "")
    assert ((2, b"a", None) in read_all_records(part)) is kept


def test_safe_offset_for_a_log_dir_is_refused(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir", segments=1, batches=5)
    before = tree(part.parent)
    code, out, err = run("repair", "--clean", *COMPACT, "--safe-offset", "1", str(part.parent))
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        (f"kcompact: error: {part.parent}: --safe-offset is an offset of one partition's log; name that "
         "partition directory alone (for a log dir, --replica-dirs fences each partition by its own copies); "
         "nothing was changed")]
    assert tree(part.parent) == before


@pytest.mark.parametrize("given, named", [
    (["--assume-compact"], "--assume-compact is"),
    (["--allow-keyless-loss"], "--allow-keyless-loss is"),
    (["--now-ms", "0"], "--now-ms is"),
    (["--safe-offset", "3"], "--safe-offset is"),
    (["--replica-dirs", "."], "--replica-dirs is"),
    (["--safe-offset", "3", "--assume-compact"], "--assume-compact, --safe-offset are"),
])
def test_options_of_the_clean_alone_are_refused_without_clean(
    tmp_path: Path, given: list[str], named: str
) -> None:
    part = build_partition(tmp_path / "logdir", segments=1, batches=5)
    before = partition_digest(part)
    for target in (part, part.parent):
        code, out, err = run("repair", *given, str(target))
        assert (code, out) == (2, "")
        them = "them" if "are" in named else "it"
        assert err.splitlines()[-1] == f"Error: {named} for --clean only; give --clean or leave {them} out"
    assert partition_digest(part) == before


def test_undo_takes_no_config_source(tmp_path: Path) -> None:
    code, _out, err = run("repair", "--undo", str(tmp_path), "--metadata-dir", str(tmp_path))
    assert code == 2 and "--undo takes a BACKUP_DIR only" in err


def test_a_clean_refused_for_want_of_a_fence_copy_says_nothing_was_changed_once(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logs")
    empty = tmp_path / "follower"
    empty.mkdir()
    before = partition_digest(part)

    code, _out, err = run("repair", "--clean", "--config", "cleanup.policy=compact", "--replica-dirs", str(empty),
                          str(part))

    assert code == 2
    assert "--replica-dirs holds no copy" in err
    assert err.count("nothing was changed") == 1 and err.rstrip().endswith("(no backup kept)")
    assert partition_digest(part) == before
