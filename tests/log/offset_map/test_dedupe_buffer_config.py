"""``log.cleaner.dedupe.buffer.size`` given with ``--config`` bounds a clean's offset map exactly as
``dedupe_buffer_size`` (``--dedupe-buffer-size``) does; that option wins when both are given; each
cleaner thread's share is the buffer / ``log.cleaner.threads``, as Kafka sizes it; and a value from
the broker's files (server.properties) does not bound an offline clean."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from kcompact.cleaner.logdir.run import clean_path
from kcompact.cleaner.round.options import CleanOptions
from kcompact.log.offset_map import KAFKA_MAX_MAP_MEMORY, thread_buffer
from tests.builders import BASE_TS, PartitionBuilder, read_all_records

NOW = BASE_TS + 10_000_000
COMPACT = {"cleanup.policy": "compact"}
KEYS = 40


def build(log_dir: Path) -> Path:
    """Two segments of 40 keys each written twice, then an active segment: an unbounded map takes
    all 40 keys, a map of 10 slots (240 bytes, 9 keys at load factor 0.9) stops early."""
    b = PartitionBuilder("bounded")
    for _ in range(2):
        b.batch([(b"key-%02d" % i, b"v") for i in range(KEYS)]).roll()
    b.batch([(b"x", b"1")])
    return b.write(log_dir)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("template") / "logdir")


def clean(template: Path, where: Path, overrides: dict[str, str], **options: Any) -> tuple[int | None, list[Any]]:
    log_dir = Path(shutil.copytree(template.parent, where / "logdir"))
    part = log_dir / template.name
    run = clean_path(part, cli_overrides={**COMPACT, **overrides}, options=CleanOptions(now_ms=NOW, **options))
    (result,) = run.results
    return result.end_offset, read_all_records(part)


def test_config_bounds_the_map_as_the_option_does(template: Path, tmp_path: Path) -> None:
    unbounded = clean(template, tmp_path / "unbounded", {})
    by_option = clean(template, tmp_path / "option", {}, dedupe_buffer_size=240)
    by_config = clean(template, tmp_path / "config", {"log.cleaner.dedupe.buffer.size": "240"})
    assert unbounded[0] == 2 * KEYS
    assert by_option[0] is not None and by_option[0] < unbounded[0]
    assert by_config == by_option


def test_the_option_wins_over_config(template: Path, tmp_path: Path) -> None:
    by_option = clean(template, tmp_path / "option", {}, dedupe_buffer_size=480)
    both = clean(template, tmp_path / "both", {"log.cleaner.dedupe.buffer.size": "240"}, dedupe_buffer_size=480)
    assert both == by_option
    assert both != clean(template, tmp_path / "config", {"log.cleaner.dedupe.buffer.size": "240"})


def test_each_cleaner_thread_gets_its_share(template: Path, tmp_path: Path) -> None:
    one_thread = clean(template, tmp_path / "one", {}, dedupe_buffer_size=240)
    two_threads = clean(template, tmp_path / "two", {"log.cleaner.threads": "2"}, dedupe_buffer_size=480)
    assert two_threads == one_thread
    assert thread_buffer(480, 2) == 240
    assert thread_buffer(480, 0) == 480  # no cleaner thread on the broker: the whole buffer
    assert thread_buffer(2**40, 1) == KAFKA_MAX_MAP_MEMORY == 2**31 - 1


def test_server_properties_do_not_bound_an_offline_clean(template: Path, tmp_path: Path) -> None:
    properties = tmp_path / "server.properties"
    properties.write_text("log.cleaner.dedupe.buffer.size=240\n")
    log_dir = Path(shutil.copytree(template.parent, tmp_path / "copy" / "logdir"))
    run = clean_path(log_dir / template.name, cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW),
                     server_properties=properties)
    assert [r.end_offset for r in run.results] == [2 * KEYS]
