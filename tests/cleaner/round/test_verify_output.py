"""The pre-swap self-check reads each output ``.log`` once and reports what one walk per index reported.

Its index checks take the facts of its own walk (``verify_index_with_facts``); each corrupted output here
must give exactly the problems ``verify_index_file`` gives walking the log itself, and the same
``CleanerStateError`` message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from kcompact.cleaner.disk.swap import CleanedSegment
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.round.verify_output import check_cleaned_segment
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.errors import CleanerStateError, KcompactError
from kcompact.segment.log_file import LogFile
from kcompact.segment.partition import SegmentFiles
from kcompact.segment.txn_index import AbortedTxn, decode_txn_index, encode_txn_index
from kcompact.segment.verify_index import (
    LogFacts,
    read_log_facts,
    verify_index_file,
    verify_index_with_facts,
)
from tests.builders import PartitionBuilder
from tests.cleaner.workers.test_parallel import NOW, config, transactions
from tests.records.scan.accel_compare import accel_switched, needs_c

INDEX_KINDS = ("index", "timeindex", "txnindex")


def cleaned_segment(tmp_path: Path) -> CleanedSegment:
    """The first segment of a cleaned partition, with a ``.txnindex`` naming one real ABORT marker."""
    part = transactions(tmp_path / "logdir")
    clean_partition(part, config({"index.interval.bytes": "0"}), CleanOptions(now_ms=NOW))  # a full .index
    log_path = min(part.glob("*.log"))
    base = int(log_path.name.split(".")[0])
    with LogFile(log_path) as log:
        markers = [b for b in log.iter_batches() if b.is_control]
        abort = [(b.producer_id, b.last_offset) for b in markers if b.producer_id == 2]
    assert abort, "the first output keeps producer 2's ABORT marker"
    producer, offset = abort[0]
    txn_path = log_path.with_suffix(".txnindex")
    txn_path.write_bytes(encode_txn_index([AbortedTxn(producer, base, offset, base)]))
    files = {"log": log_path}
    files.update({kind: log_path.with_suffix("." + kind) for kind in INDEX_KINDS})
    assert all(path.exists() for path in files.values())
    return CleanedSegment(part, base, log_path.stat().st_size, files)


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


def other_producer(path: Path) -> None:
    """The entry names the marker's offset but another producer (checked against the log's markers)."""
    (txn,) = decode_txn_index(path.read_bytes())
    path.write_bytes(encode_txn_index([replace(txn, producer_id=txn.producer_id + 1)]))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-5])


CORRUPTIONS: dict[str, Callable[[CleanedSegment], None]] = {
    "none": lambda seg: None,
    "log tail cut": lambda seg: truncate(seg.files["log"]),
    "index entry": lambda seg: flip_last_byte(seg.files["index"]),
    "timeindex entry": lambda seg: flip_last_byte(seg.files["timeindex"]),
    "txnindex producer": lambda seg: other_producer(seg.files["txnindex"]),
    "index cut": lambda seg: truncate(seg.files["index"]),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_index_problems_from_one_walk_equal_a_walk_per_index(tmp_path: Path, corruption: str) -> None:
    seg = cleaned_segment(tmp_path)
    CORRUPTIONS[corruption](seg)
    log_path = seg.files["log"]
    walked: LogFacts | Exception
    try:
        walked = read_log_facts(log_path)
    except KcompactError as err:
        walked = err
    found = {kind: verify_index_with_facts(seg.files[kind], seg.base_offset, log_path, walked)
             for kind in INDEX_KINDS}
    expected = {kind: verify_index_file(seg.files[kind], seg.base_offset, log_path) for kind in INDEX_KINDS}
    assert found == expected
    assert any(expected.values()) == (corruption != "none")


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_the_self_check_message_is_the_first_problem_of_the_log_then_of_each_index(
    tmp_path: Path, corruption: str
) -> None:
    seg = cleaned_segment(tmp_path)
    CORRUPTIONS[corruption](seg)
    log_path = seg.files["log"]
    problems: list[str] = []
    try:
        read_log_facts(log_path)
    except KcompactError as err:
        problems.append(str(err))  # the cleaned output's own rules add nothing for these corruptions
    for kind in INDEX_KINDS:
        path = seg.files[kind]
        problems += [f"{path.name}: {p}" for p in verify_index_file(path, seg.base_offset, log_path)]
    if not problems:
        check_cleaned_segment(seg, [], NOW)
        return
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    with pytest.raises(CleanerStateError) as info:
        check_cleaned_segment(seg, [], NOW)
    assert str(info.value) == (f"{log_path}: the cleaned output of  fails kcompact's self-check, nothing "
                               f"was changed: {problems[0]}{more}")


@pytest.fixture
def count_walks(monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[str]]:
    """Call it to start listing each file a ``LogFile`` walks batch by batch (its name, once a walk)."""
    def start() -> list[str]:
        walked: list[str] = []
        real = LogFile.iter_batches

        def counted(self: LogFile, *args: int) -> object:
            walked.append(self.path.name)
            return real(self, *args)

        monkeypatch.setattr(LogFile, "iter_batches", counted)
        return walked

    return start


def test_the_self_check_reads_the_output_log_once(tmp_path: Path, count_walks: Callable[[], list[str]]) -> None:
    seg = cleaned_segment(tmp_path)
    flip_last_byte(seg.files["index"])  # the index checks still compare with the log
    walks = count_walks()
    with pytest.raises(CleanerStateError, match=r"\.index: entry"):
        check_cleaned_segment(seg, [], NOW)
    assert walks == [seg.files["log"].name]


@dataclass(frozen=True)
class _Source:
    files: SegmentFiles


def test_a_batch_problem_names_the_source_segment_and_its_position_there(tmp_path: Path) -> None:
    seg = cleaned_segment(tmp_path)
    output = seg.files["log"].read_bytes()
    with LogFile(seg.files["log"]) as log:
        first_batch, *_middle, last_batch = [(b.position, b.size_in_bytes, b.base_offset, b.last_offset)
                                             for b in log.iter_batches()]
    source = tmp_path / "source" / seg.files["log"].name
    source.parent.mkdir()
    prefix = output[: first_batch[1]]  # the source holds one batch more before the same batches
    source.write_bytes(prefix + output)
    files = SegmentFiles(seg.base_offset, source, len(prefix + output), 0, None, None, None)
    position, _size, first, last = last_batch

    with pytest.raises(CleanerStateError) as info:
        check_cleaned_segment(seg, [_Source(files)], first_uncleanable=last)  # only the last batch reaches it
    assert str(info.value) == (
        f"{source} at position {len(prefix) + position}: batch (offsets {first} to {last}) reaches past the "
        f"cleanable range, which ends before {last}; found by kcompact's self-check of the cleaned output of "
        f"{source.name}, nothing was changed")

    with pytest.raises(CleanerStateError) as info:
        check_cleaned_segment(seg, [], first_uncleanable=last)  # no source to find it in: the output is named
    assert str(info.value) == (
        f"{seg.files['log']}: the cleaned output of  fails kcompact's self-check, nothing was changed: batch "
        f"(offsets {first} to {last}) at position {position} reaches past the cleanable range, which ends "
        f"before {last}")


def plain_cleaned(tmp_path: Path) -> CleanedSegment:
    """The first output segment of a cleaned partition of data batches only (no marker, no txn)."""
    b = PartitionBuilder("plain")
    for n in range(12):
        b.batch([(b"k%d" % (i % 7), b"v%d" % n) for i in range(n, n + 5)] + [(b"u%d" % n, b"x")])
    b.roll()
    b.batch([(b"k0", b"active")])
    part = b.write(tmp_path / "logdir")
    clean_partition(part, config({"index.interval.bytes": "0"}), CleanOptions(now_ms=NOW))
    log_path = min(part.glob("*.log"))
    files = {"log": log_path, **{k: log_path.with_suffix("." + k) for k in ("index", "timeindex")}}
    return CleanedSegment(part, int(log_path.name.split(".")[0]), log_path.stat().st_size, files)


def _swap_batches(path: Path) -> None:
    with LogFile(path) as log:
        spans = [(b.position, b.position + b.size_in_bytes) for b in log.iter_batches()]
    data = path.read_bytes()
    (a0, a1), (b0, b1) = spans[1], spans[2]
    path.write_bytes(data[:a0] + data[b0:b1] + data[a0:a1] + data[b1:])


def _flip_record_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40  # inside a batch's records: only its CRC tells
    path.write_bytes(bytes(data))


def _damaged(seg: CleanedSegment, damage: Callable[[Path], None]) -> tuple[CleanedSegment, int]:
    damage(seg.files["log"])
    return seg, NOW


PLAIN_CASES: dict[str, Callable[[CleanedSegment], tuple[CleanedSegment, int]]] = {
    "none": lambda seg: (seg, NOW),
    "crc": lambda seg: _damaged(seg, _flip_record_byte),
    "order": lambda seg: _damaged(seg, _swap_batches),
    "past the range": lambda seg: (seg, 10),
    "below the base": lambda seg: (replace(seg, base_offset=seg.base_offset + 3), NOW),
    "overflow": lambda seg: (replace(seg, base_offset=seg.base_offset - 2**31 + 5), NOW),
}


@needs_c
@pytest.mark.parametrize("case", list(PLAIN_CASES))
def test_the_c_walk_of_a_plain_output_checks_as_the_batch_walk(tmp_path: Path, case: str) -> None:
    seg, first_uncleanable = PLAIN_CASES[case](plain_cleaned(tmp_path))
    outcomes: list[str | None] = []
    for on in (False, True):
        with accel_switched(on):
            try:
                check_cleaned_segment(seg, [], first_uncleanable)
                outcomes.append(None)
            except CleanerStateError as err:
                outcomes.append(str(err))
    assert outcomes[0] == outcomes[1]
    assert (outcomes[0] is None) == (case == "none"), outcomes[0]


@needs_c
def test_the_self_check_of_a_plain_output_walks_it_in_c(tmp_path: Path, count_walks: Callable[[], list[str]]) -> None:
    seg = plain_cleaned(tmp_path)
    walks = count_walks()
    with accel_switched(True):
        check_cleaned_segment(seg, [], NOW)
    assert walks == []
