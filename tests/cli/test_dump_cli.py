"""``kcompact inspect dump``: whole outputs, exit codes, stderr lines, --json, a live broker's lock."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from kcompact.inspect.dump import dump_path
from kcompact.records.batch_encoding import encode_batch, encode_records_batch
from kcompact.records.record import Header, Record, encode_record
from tests.builders import BASE_TS, PartitionBuilder
from tests.conftest import real_fixture
from tests.segment_writer import write_segment

LOG = "00000000000000000000.log"


def run(*args: str | Path) -> Result:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80"})
    return runner.invoke(cli, ["inspect", "dump", *map(str, args)])


def small_partition(log_dir: Path) -> Path:
    return (PartitionBuilder("t", 0).batch([(b"k1", b"v1")], headers=(Header(b"h", b"x"),))
            .batch([(b"k2", None), (None, b"\x00\x01")], producer_id=7, transactional=True)
            .marker(7, commit=False).write(log_dir))


def three_batches(log_dir: Path) -> Path:
    """Batches of 1, 2 and 3 records (offsets 0..5) at positions 0, 72 and 155, in the log dir of a broker that
    shut down cleanly: the next start trusts its indexes as they are (``LogLoader.recoverLog``)."""
    part = log_dir / "t-0"
    batches = [encode_batch([Record(o, BASE_TS + o, b"k%d" % o, b"v%d" % o) for o in offsets],
                            base_offset=offsets[0]) for offsets in ([0], [1, 2], [3, 4, 5])]
    write_segment(part, 0, batches)
    (log_dir / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":1}')
    return part


def snapshot(part: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(part.iterdir())}


def test_text_output_is_kafka_dump_log_shaped(tmp_path: Path) -> None:
    part = small_partition(tmp_path)
    result = run(part, "--records", "--verify-index")
    assert (result.exit_code, result.stderr) == (0, "")
    seg = f"{part}/00000000000000000000"
    v2 = "magic: 2 compresscodec: none"
    assert result.stdout == (
        f"Dumping {seg}.log\n"
        "Log starting offset: 0\n"
        "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: -1 isTransactional: false isControl: false "
        "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000000 size: 76 "
        f"{v2} crc: 3549958330 isvalid: true\n"
        "| offset: 0 CreateTime: 1700000000000 keySize: 2 valueSize: 2 sequence: -1 "
        "headerKeys: [h] key: k1 payload: v1\n"
        "baseOffset: 1 lastOffset: 2 count: 2 baseSequence: 0 lastSequence: 1 producerId: 7 "
        "producerEpoch: 0 partitionLeaderEpoch: -1 isTransactional: true isControl: false "
        "deleteHorizonMs: OptionalLong.empty position: 76 CreateTime: 1700000000002 size: 79 "
        f"{v2} crc: 4019183400 isvalid: true\n"
        "| offset: 1 CreateTime: 1700000000001 keySize: 2 valueSize: -1 sequence: 0 "
        "headerKeys: [] key: k2\n"
        "| offset: 2 CreateTime: 1700000000002 keySize: -1 valueSize: 2 sequence: 1 "
        "headerKeys: [] payload: base64:AAE=\n"
        "baseOffset: 3 lastOffset: 3 count: 1 baseSequence: -1 lastSequence: -1 producerId: 7 "
        "producerEpoch: 0 partitionLeaderEpoch: -1 isTransactional: true isControl: true "
        "deleteHorizonMs: OptionalLong.empty position: 155 CreateTime: 1700000000003 size: 78 "
        f"{v2} crc: 4276907293 isvalid: true\n"
        "| offset: 3 CreateTime: 1700000000003 keySize: 4 valueSize: 6 sequence: -1 "
        "headerKeys: [] endTxnMarker: ABORT coordinatorEpoch: 1\n"
        f"Verified {seg}.index against {seg}.log: ok\n"
        f"Verified {seg}.timeindex against {seg}.log: ok\n"
        f"Verified {seg}.txnindex against {seg}.log: ok\n"
    )


def test_index_files_print_their_entries(tmp_path: Path) -> None:
    part = small_partition(tmp_path)
    seg = f"{part}/00000000000000000000"
    assert run(f"{seg}.txnindex").stdout == (
        f"Dumping {seg}.txnindex\n"
        "version: 0 producerId: 7 firstOffset: 1 lastOffset: 3 lastStableOffset: 4\n")
    assert run(f"{seg}.timeindex").stdout == (
        f"Dumping {seg}.timeindex\ntimestamp: 1700000000003 offset: 3\n")
    assert run(f"{seg}.index").stdout == f"Dumping {seg}.index\n{seg}.index is empty.\n"


def test_json_lines_are_the_library_items(tmp_path: Path) -> None:
    part = small_partition(tmp_path)
    result = run(part, "--records", "--verify-index", "--json")
    assert (result.exit_code, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert [json.loads(line) for line in lines] == list(
        dump_path(part, records=True, verify_index=True))
    assert lines[1] == (
        '{"type":"batch","file":"' + f"{part}/{LOG}" + '","position":0,"base_offset":0,'
        '"last_offset":0,"count":1,"magic":2,"compression":"none","timestamp_type":"CreateTime",'
        '"is_control":false,"is_transactional":false,"producer_id":-1,"producer_epoch":-1,'
        '"base_sequence":-1,"partition_leader_epoch":-1,"max_timestamp":1700000000000,'
        '"delete_horizon_ms":null,"size_in_bytes":76,"crc":3549958330,"crc_valid":true}')
    assert lines[2] == ('{"type":"record","offset":0,"timestamp":1700000000000,"key":"azE=",'
                        '"value":"djE=","headers":[{"key":"h","value":"eA=="}],"control":null,'
                        '"coordinator_epoch":null}')


def test_real_partition_dumps_with_exit_0() -> None:
    part = real_fixture("kraft37-consumer-offsets", "__consumer_offsets-6")
    result = run(part, "--records", "--verify-index")
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout.count(" isvalid: true\n") == 13
    assert "isvalid: false" not in result.stdout


# ---------------------------------------------------------------------------------------------
# Bad input: one stderr line with file, position and expected/found; exit 2; nothing modified


def patched(part: Path, position: int, patch: bytes) -> None:
    log = part / LOG
    data = bytearray(log.read_bytes())
    data[position : position + len(patch)] = patch
    log.write_bytes(bytes(data))


@pytest.mark.parametrize("patch_at, patch, error, batches", [
    (72 + 17, b"\x00", ("at position 72: batch 1..2 fails its CRC check; expected a checksum "
                       "matching its bytes, found crc"), 3),
    (72 + 8, struct.pack(">i", 13), ("at position 72: record size is smaller than minimum record "
                                    "overhead; expected >= 14, found 13"), 1),
    (72 + 16, b"\x07", "at position 72: invalid magic byte; expected 0, 1 or 2, found 7", 1),
    (72 + 22, b"\x05", "at position 72: unknown compression codec; expected 0..4, found 5", 2),
])
def test_corrupt_batch_in_the_middle(tmp_path: Path, patch_at: int, patch: bytes, error: str,
                                     batches: int) -> None:
    part = three_batches(tmp_path)
    patched(part, patch_at, patch)
    before = snapshot(part)
    for args in ((part,), (part, "--records", "--verify-index"), (part / LOG, "--json")):
        result = run(*args)
        assert result.exit_code == 2
        lines = result.stderr.splitlines()
        assert all(line.startswith("kcompact: error: ") for line in lines)
        (line,) = [e for e in lines if e.startswith(f"kcompact: error: {part / LOG} ")]
        assert line.startswith(f"kcompact: error: {part / LOG} {error}"), line
        assert result.stdout.count("isvalid") + result.stdout.count('"crc_valid"') == batches
    assert snapshot(part) == before


def test_truncated_tail_prints_the_whole_batches_first(tmp_path: Path) -> None:
    part = three_batches(tmp_path)
    log = part / LOG
    log.write_bytes(log.read_bytes()[:155 + 40])
    before = snapshot(part)
    result = run(log)
    assert result.exit_code == 2
    assert result.stderr == (f"kcompact: error: {log} at position 155: entry declares 94 bytes "
                             "but only 40 remain; expected the whole entry inside the data\n")
    assert [line.split(" position: ")[1].split()[0] for line in result.stdout.splitlines()[2:]] == [
        "0", "72"]
    assert snapshot(part) == before


def test_json_reports_problems_on_stdout_and_stderr(tmp_path: Path) -> None:
    part = three_batches(tmp_path)
    patched(part, 72 + 16, b"\x07")
    result = run(part / LOG, "--json")
    assert result.exit_code == 2
    problem = json.loads(result.stdout.splitlines()[-1])
    assert problem == {"type": "problem", "file": str(part / LOG), "position": 72,
                       "message": "invalid magic byte; expected 0, 1 or 2, found 7"}
    assert result.stderr == (f"kcompact: error: {part / LOG} at position 72: invalid magic byte; "
                             "expected 0, 1 or 2, found 7\n")


def test_record_count_mismatch_goes_on_to_the_next_batch(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    raw = encode_record(0, 0, b"a", b"1")
    lying = encode_records_batch(raw, count=2, base_offset=0, last_offset_delta=1,
                                 base_timestamp=BASE_TS, max_timestamp=BASE_TS)
    write_segment(part, 0, [lying, encode_batch([Record(2, BASE_TS, b"b", b"2")], base_offset=2)])
    result = run(part, "--records")
    assert result.exit_code == 2
    assert result.stderr == (
        f"kcompact: error: {part / LOG} at position {61 + len(raw)}: Incorrect declared batch "
        "size, premature EOF reached; expected 2 records, found 1\n")
    assert result.stdout.splitlines()[-1].startswith("| offset: 2 CreateTime: ")


def test_garbage_index_file(tmp_path: Path) -> None:
    part = three_batches(tmp_path)
    index = part / "00000000000000000000.index"
    index.write_bytes(b"\x01" * 13)
    before = snapshot(part)
    result = run(index)
    assert result.exit_code == 2
    assert result.stdout == f"Dumping {index}\n"
    assert result.stderr == (
        f"kcompact: error: {index} at position 8: offset index size is not a whole number of "
        "entries; expected a multiple of 8 bytes, found 13 bytes\n")
    verified = run(part, "--verify-index")
    assert verified.exit_code == 2
    assert f"Verified {index} against {part / LOG}: 1 problem\n" in verified.stdout
    assert snapshot(part) == before


def test_index_disagreeing_with_the_log(tmp_path: Path) -> None:
    part = three_batches(tmp_path)
    index = part / "00000000000000000000.index"
    index.write_bytes(struct.pack(">ii", 2, 73))
    result = run(index, "--verify-index")
    assert result.exit_code == 2
    assert result.stdout == (f"Dumping {index}\noffset: 2 position: 73\n"
                             f"Verified {index} against {part / LOG}: 1 problem\n")
    assert result.stderr == (f"kcompact: error: {index}: entry does not point at a batch start: "
                             "entry 0 points at position 73\n")


def test_paths_that_are_not_segments(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("hello")
    result = run(tmp_path / "x.txt")
    assert result.exit_code == 2
    assert result.stderr == (f"kcompact: error: {tmp_path / 'x.txt'}: not a segment file; expected "
                             "<offset>.log, .index, .timeindex, .txnindex or .snapshot, a checkpoint file or "
                             "partition.metadata\n")
    missing = run(tmp_path / "nope.log")
    assert missing.exit_code == 2 and "does not exist" in missing.stderr


# ---------------------------------------------------------------------------------------------
# A live broker's log dir: readable, with a warning on stderr only

HOLD_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


@contextmanager
def broker_running(log_dir: Path) -> Iterator[None]:
    """A child process holding ``<log_dir>/.lock`` the way a broker does."""
    child = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(log_dir / ".lock")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "locked\n"
        yield
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=10)


def test_live_broker_gets_a_warning_on_stderr_only(tmp_path: Path) -> None:
    part = small_partition(tmp_path)
    quiet = run(part, "--json").stdout
    warning = (f"kcompact: warning: {tmp_path / '.lock'}: held by a running Kafka broker: the "
               "active segment may change while it is read (a partial last batch, preallocated "
               "indexes)\n")
    with broker_running(tmp_path):
        as_json = run(part, "--json")
        as_text = run(part / LOG)
    assert (as_json.exit_code, as_json.stdout, as_json.stderr) == (0, quiet, warning)
    assert (as_text.exit_code, as_text.stderr) == (0, warning)
    assert run(part).stderr == ""


def test_live_broker_appending_to_the_active_segment_is_not_bad_input(tmp_path: Path) -> None:
    part = small_partition(tmp_path)
    log = part / LOG
    size = log.stat().st_size
    log.write_bytes(log.read_bytes() + encode_batch([Record(4, BASE_TS, b"k", b"v")],
                                                    base_offset=4)[:30])
    assert run(part, "--verify-index").exit_code == 2
    with broker_running(tmp_path):
        result = run(part, "--verify-index")
    assert result.exit_code == 0
    assert result.stderr.splitlines()[1] == (
        f"kcompact: warning: {log}: ends in a partial entry at position {size}, which the running "
        "broker may be writing; stopped there")
    assert result.stdout.count(": ok\n") == 3


def test_dump_reads_kraft_quorum_state_and_meta_properties() -> None:
    log_dir = real_fixture("kraft37-cleaned-logdir")
    quorum = run(log_dir / "__cluster_metadata-0" / "quorum-state")
    assert quorum.exit_code == 0, quorum.output
    assert quorum.stdout.splitlines()[1:] == [
        "key               value", "leaderId          1", "leaderEpoch       1", "votedId           -1",
        "votedDirectoryId  AAAAAAAAAAAAAAAAAAAAAA", "data_version      1"]
    meta = run(log_dir / "meta.properties", "--json")
    assert meta.exit_code == 0, meta.output
    items = [json.loads(line) for line in meta.stdout.splitlines()]
    assert items[0]["kind"] == "meta-properties"
    assert {i["key"]: i["value"] for i in items[1:]} == {
        "cluster.id": "0wHLXdrKStejkyBzi8qBEw", "directory.id": "yYuMrFRVQVSX0VVQPcMSrA", "node.id": "1",
        "version": "1"}


def test_dump_of_a_partition_with_all_files_includes_its_indexes_snapshots_and_checkpoints() -> None:
    part = real_fixture("kraft37-cleaned-logdir", "__consumer_offsets-31")
    result = run(part, "--all-files", "--json")
    assert result.exit_code == 0, result.output
    files = [(Path(i["file"]).name, i["kind"]) for i in map(json.loads, result.stdout.splitlines())
             if i["type"] == "file"]
    assert files == [(p.name, kind) for p, kind in (
        (part / "00000000000000000000.log", "log"), (part / "00000000000000000003.log", "log"),
        (part / "00000000000000000000.timeindex", "timeindex"), (part / "00000000000000000003.snapshot", "snapshot"),
        (part / "00000000000000000003.timeindex", "timeindex"), (part / "00000000000000000005.snapshot", "snapshot"),
        (part / "leader-epoch-checkpoint", "leader-epoch-checkpoint"),
        (part / "partition.metadata", "partition-metadata"))]


def test_a_key_no_record_has_is_said() -> None:
    part = real_fixture("kraft37-cleaned-logdir", "__consumer_offsets-31")
    result = run(part, "--key", "nosuch")
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [f"kcompact: warning: {part}: no record has the key 'nosuch'"]
    ranged = run(part, "--key", "nosuch", "--from-offset", "3")
    assert ranged.stderr.splitlines() == [
        f"kcompact: warning: {part}: no record has the key 'nosuch' in the selected range"]
