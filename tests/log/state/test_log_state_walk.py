"""Loading a partition's state through the C header walk (``log_state._data_only``, for segments of
non-transactional data batches) gives exactly what the batch-by-batch walk gives: every segment's facts,
each producer's state (and the order producers first appear in), the transactions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcompact.config.topic_config import TopicConfig
from kcompact.log.state import log_state
from kcompact.log.state.log_state import LogState, load_log_state
from kcompact.records.scan import accel
from kcompact.segment import log_file
from kcompact.segment.log_file import LogFile
from kcompact.segment.partition import open_partition
from tests.partition_builder import PartitionBuilder
from tests.records.scan.accel_compare import accel_switched, needs_c


def _facts(state: LogState) -> tuple[Any, ...]:
    producers = state.producers
    return (state.segments, state.log_end_offset, state.high_watermark,
            list(producers._producers.items()), producers._unreplicated,
            state.transactions, state.aborted_by_segment, state.warnings)


def _both(part: Path) -> tuple[Any, ...]:
    with accel_switched(False):
        walked = _facts(load_log_state(open_partition(part), TopicConfig.defaults()))
    with accel_switched(True):
        quick = _facts(load_log_state(open_partition(part), TopicConfig.defaults()))
        numpy_rows = log_state._NUMPY_ROWS
        log_state._NUMPY_ROWS = 1  # each producer's ends picked by numpy, as in a log of many batches
        try:
            by_numpy = _facts(load_log_state(open_partition(part), TopicConfig.defaults()))
        finally:
            log_state._NUMPY_ROWS = numpy_rows
    assert quick == walked
    assert by_numpy == walked
    return walked


@needs_c
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_c_walk_loads_what_the_batch_walk_loads(tmp_path_factory: Any, data: st.DataObject) -> None:
    b = PartitionBuilder("state")
    epochs: dict[int, int] = {}
    for _ in range(data.draw(st.integers(1, 4))):
        for n in range(data.draw(st.integers(0, 8))):
            kind = data.draw(st.sampled_from(["plain", "idempotent", "idempotent", "transaction"]))
            producer = data.draw(st.sampled_from([3, 7, 11]))
            if data.draw(st.integers(0, 5)) == 0:
                epochs[producer] = epochs.get(producer, 0) + 1  # an epoch bump
            kvs = [(b"k%d" % i, b"v%d" % n) for i in range(data.draw(st.integers(1, 3)))]
            codec = data.draw(st.sampled_from([0, 0, 4]))
            if kind == "plain":
                b.batch(kvs, compression=codec)
            elif kind == "idempotent":
                b.batch(kvs, producer_id=producer, producer_epoch=epochs.get(producer, 0),
                        compression=codec)
            else:
                b.batch(kvs, producer_id=90 + producer, transactional=True)
                b.marker(90 + producer, commit=data.draw(st.booleans()))
        b.roll()
    b.batch([(b"active", b"x")], producer_id=7, producer_epoch=epochs.get(7, 0))
    part = b.write(Path(tmp_path_factory.mktemp("state")))
    if data.draw(st.booleans()):  # a segment without its index: Kafka would recover it, walked
        indexes = sorted(part.glob("*.index"))
        indexes[data.draw(st.integers(0, len(indexes) - 1))].unlink()
    _both(part)


@needs_c
def test_the_c_walk_is_taken_for_data_segments(tmp_path: Path, monkeypatch: Any) -> None:
    b = PartitionBuilder("taken")
    for n in range(4):
        b.batch([(b"k", b"%d" % n)], producer_id=5)
        b.batch([(b"j", b"%d" % n)])
    b.roll()
    b.batch([(b"t", b"x")], producer_id=8, transactional=True)
    b.marker(8, commit=True)
    b.roll()
    part = b.write(tmp_path)
    walks: list[bool] = []
    kernel = accel.batch_producers

    def counted(buf: Any, start: int, end: int) -> Any:
        found = kernel(buf, start, end)
        walks.append(found is not None and found[0] == len(buf))
        return found

    monkeypatch.setattr(accel, "batch_producers", counted)
    facts = _both(part)
    assert walks[-3:] == [True, False, True]  # data batches, a transaction (walked batch by batch), empty
    assert [pid for pid, _ in facts[3]] == [5, 8]


def test_the_batch_walk_lets_the_pages_behind_it_go(tmp_path: Path, monkeypatch: Any) -> None:
    """A segment the C walk does not take (transactions: Kafka Streams' compacted changelogs under exactly-once)
    is walked batch by batch: that walk too lets the pages behind it go every window, as the C walk does, so the
    load's peak RSS does not grow with the segment size; and the state it loads is the same as without."""
    b = PartitionBuilder("txn-walk")
    for n in range(60):
        b.batch([(b"k%d" % n, b"v" * 20_000)], producer_id=90, transactional=True)
        b.marker(90, commit=n % 3 != 0)
    b.roll()
    part = b.write(tmp_path)
    expected = _facts(load_log_state(open_partition(part), TopicConfig.defaults()))
    segment = part / "00000000000000000000.log"
    let_go: list[int] = []
    monkeypatch.setattr(log_file, "HEADER_WINDOW", 100_000)
    monkeypatch.setattr(LogFile, "forget_before",
                        lambda self, position: let_go.append(position) if self.path == segment else None)
    assert _facts(load_log_state(open_partition(part), TopicConfig.defaults())) == expected
    size = segment.stat().st_size
    assert len(let_go) >= size // 100_000 - 1 and let_go == sorted(let_go) and let_go[-1] > size - 200_000
