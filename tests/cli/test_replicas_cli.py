"""``kcompact inspect replicas`` (exit 0 agree, 3 diverge, 2 bad input; --json) and ``clean``'s replica
fence options."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kcompact.cleaner.round.options import CleanOptions
from kcompact.cli.main import cli
from kcompact.config.sources import ConfigSources
from kcompact.errors import RefusedError
from kcompact.spark.plan import plan_spark_clean
from tests.builders import PartitionBuilder, read_all_records
from tests.cli.test_help import COMMANDS
from tests.inspect.test_replicas import CLOCKS, busy_log, race


def run(*args: str) -> Result:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80"})
    return runner.invoke(cli, list(args), prog_name="kcompact")


def test_the_race_exits_3_and_names_the_key_in_json(tmp_path: Path) -> None:
    leader, follower = race(tmp_path)
    result = run("inspect", "replicas", str(tmp_path / "leader"), str(tmp_path / "follower"),
                 "--topic", "orders", "--partition", "0", "--json")
    assert result.exit_code == 3, result.output
    report = json.loads(result.stdout)
    assert (report["agree"], report["state_diverged"], report["divergent_keys"]) == (False, True, 1)
    [key] = report["keys"]
    assert key["key"] == "k"
    assert [(s["state"], s["offset"]) for s in key["sides"]] == [("absent", None), ("value", 0)]
    assert key["sides"][1]["value_digest"] and len(key["sides"][1]["value_digest"]) == 16
    assert [r["path"] for r in report["replicas"]] == [str(leader), str(follower)]


def test_the_race_in_text(tmp_path: Path) -> None:
    leader, follower = race(tmp_path)
    result = run("inspect", "replicas", str(leader), str(follower))
    assert result.exit_code == 3
    lines = result.stdout.splitlines()
    assert "state: 1 of 3 keys differ" in lines
    assert any(line.startswith("  k: [0] absent; [1] value ") and line.endswith(" @0") for line in lines)
    assert lines[-1].startswith("the replicas DIVERGE")


def test_max_keys_caps_the_list_not_the_count(tmp_path: Path) -> None:
    one, two = PartitionBuilder(), PartitionBuilder()
    one.batch([(f"k{i}".encode(), b"1") for i in range(5)])
    two.batch([(f"k{i}".encode(), b"2") for i in range(5)])
    result = run("inspect", "replicas", str(one.write(tmp_path / "b1")), str(two.write(tmp_path / "b2")),
                 "--json", "--max-keys", "2")
    report = json.loads(result.stdout)
    assert (result.exit_code, report["divergent_keys"], len(report["keys"])) == (3, 5, 2)


def test_equivalent_copies_exit_0(tmp_path: Path) -> None:
    raw = busy_log().write(tmp_path / "b1")
    copy = shutil.copytree(raw, tmp_path / "b2" / raw.name)
    shutil.copy(raw.parent / "replication-offset-checkpoint", tmp_path / "b2")
    for now in CLOCKS:
        assert run("clean", str(copy), "--config", "cleanup.policy=compact", "--from-start",
                   "--now-ms", str(now)).exit_code == 0
    result = run("inspect", "replicas", str(raw), str(copy))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1].startswith("the replicas agree")


def test_bad_input_exits_2(tmp_path: Path) -> None:
    one = PartitionBuilder().batch([(b"a", b"1")]).write(tmp_path / "b1")
    result = run("inspect", "replicas", str(one), "--json")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["message"].endswith("expected two or more replicas")
    other = PartitionBuilder(partition=1).batch([(b"a", b"1")]).write(tmp_path / "b2")
    result = run("inspect", "replicas", str(one), str(other))
    assert result.exit_code == 2
    assert "a copy of partition orders-0; found orders-1" in result.stderr


def test_clean_with_the_fence_keeps_the_tombstone_the_lagging_copy_lacks(tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"k", b"v1")]).batch([(b"k", None)]).batch([(b"x", b"1")]).roll().batch([(b"y", b"1")])
    leader = b.write(tmp_path / "leader")
    PartitionBuilder().batch([(b"k", b"v1")]).write(tmp_path / "follower")  # fetched offset 0 only
    for now in CLOCKS:
        result = run("clean", str(leader), "--config", "cleanup.policy=compact", "--from-start",
                     "--now-ms", str(now), "--replica-dirs", str(tmp_path / "follower"))
        assert result.exit_code == 0, result.output
    assert (1, b"k", None) in read_all_records(leader)
    assert run("clean", str(leader), "--config", "cleanup.policy=compact", "--from-start",
               "--now-ms", str(CLOCKS[-1]), "--safe-offset", "2").exit_code == 0
    assert (1, b"k", None) not in read_all_records(leader)


def _tree(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_partition_named_alone_whose_fence_copy_is_missing_is_refused(tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"k", b"v1")]).batch([(b"k", None)]).batch([(b"x", b"1")]).roll().batch([(b"y", b"1")])
    leader = b.write(tmp_path / "leader")
    PartitionBuilder("orders", 1).batch([(b"k", b"v1")]).write(tmp_path / "other")  # another partition's copy
    before = _tree(tmp_path / "leader")

    result = run("clean", str(leader), "--config", "cleanup.policy=compact", "--from-start",
                 "--now-ms", str(CLOCKS[-1]), "--replica-dirs", str(tmp_path / "other"), "--json")

    assert result.exit_code == 2
    assert f"--replica-dirs holds no copy of {leader.name}" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert json.loads(result.stdout)["error"]["kind"] == "RefusedError"
    assert _tree(tmp_path / "leader") == before  # the tombstone and everything else stay


def test_safe_offset_for_a_log_dir_is_refused(tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"k", b"v1")]).batch([(b"k", None)]).roll().batch([(b"y", b"1")])
    leader = b.write(tmp_path / "logdir")
    before = _tree(leader.parent)

    result = run("clean", str(leader.parent), "--config", "cleanup.policy=compact", "--safe-offset", "1")
    assert result.exit_code == 2, result.output
    assert "--safe-offset is an offset of one partition's log" in result.stderr
    assert _tree(leader.parent) == before
    with pytest.raises(RefusedError, match="--safe-offset is an offset of one partition's log"):
        plan_spark_clean([leader.parent], ConfigSources({"cleanup.policy": "compact"}),  # spark clean's plan
                   options=CleanOptions(now_ms=CLOCKS[-1], safe_offset=1))


def test_log_dirs_take_the_shared_topic_filters(tmp_path: Path) -> None:
    leader, follower = race(tmp_path)  # orders-0 in the log dirs leader/ and follower/
    dirs = [str(tmp_path / "leader"), str(tmp_path / "follower")]
    for filters in (["--topic", "ord.*", "--partition", "0"], ["--topic", "orders"],
                    ["--exclude-topic", "users"]):
        result = run("inspect", "replicas", *dirs, *filters, "--json")
        assert result.exit_code == 3, (filters, result.output)
        assert [r["path"] for r in json.loads(result.stdout)["replicas"]] == [str(leader), str(follower)]
        assert result.stderr.startswith("kcompact: ") and " matched 2 of 2 partitions" in result.stderr
    PartitionBuilder("orders", 1).batch([(b"a", b"1")]).write(tmp_path / "leader")
    result = run("inspect", "replicas", *dirs, "--topic", "orders")  # two partitions: each shared one a row
    assert result.exit_code == 3, result.output
    assert result.stdout.splitlines() == [
        "orders-0: 2 copies DIVERGE (state: 1 key, 0 transactions)",
        ("1 partition with two or more copies; 1 diverge (one partition's full report: --topic and "
        "--partition naming it)")]  # orders-1 has a single copy: nothing to compare it with


TAKING_SAFE_OFFSET = [path for path, command in COMMANDS if any(p.name == "safe_offset" for p in command.params)]


def test_the_commands_taking_safe_offset_are_known() -> None:
    assert {" ".join(path) for path in TAKING_SAFE_OFFSET} == {"clean", "repair", "spark clean"}


@pytest.mark.parametrize("value", ["-1", str(2**63), str(2**64 + 5)])
@pytest.mark.parametrize("path", TAKING_SAFE_OFFSET, ids=[" ".join(p) for p in TAKING_SAFE_OFFSET])
def test_a_safe_offset_beyond_a_java_long_is_refused(path: tuple[str, ...], value: str, tmp_path: Path) -> None:
    """2^63 or more would fence nothing (no offset reaches it): refused in one line, nothing read or written."""
    b = PartitionBuilder()
    b.batch([(b"k", b"v1")]).batch([(b"k", None)]).roll().batch([(b"y", b"1")])
    leader = b.write(tmp_path / "logdir")
    before = _tree(leader.parent)
    clean = ("--clean",) if path == ("repair",) else ()
    result = run(*path, str(leader), *clean, f"--safe-offset={value}", "--config", "cleanup.policy=compact")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines()[-1] == (
        f"Error: Invalid value for '--safe-offset': an offset of the partition's log; expected "
        f"0..9223372036854775807, found {value}")
    assert _tree(leader.parent) == before


def test_log_dirs_without_a_filter_compare_every_partition_they_share(tmp_path: Path) -> None:
    race(tmp_path)  # orders-0 in the log dirs leader/ and follower/: they diverge
    for log_dir in ("leader", "follower"):
        PartitionBuilder("users", 0).batch([(b"u", b"1")]).write(tmp_path / log_dir)
    dirs = [str(tmp_path / "leader"), str(tmp_path / "follower")]
    result = run("inspect", "replicas", *dirs)
    assert result.exit_code == 3, result.output
    assert result.stdout.splitlines()[:2] == ["orders-0: 2 copies DIVERGE (state: 1 key, 0 transactions)",
                                              "users-0: 2 copies agree"]
    rows = json.loads(run("inspect", "replicas", *dirs, "--json").stdout)
    assert [(r["topic"], r["partition"], r["agree"]) for r in rows] == [("orders", 0, False), ("users", 0, True)]
    assert rows[0]["report"]["divergent_keys"] == 1  # each row carries the partition's own report
