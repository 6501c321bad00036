"""The broker tests' cluster ids are ones ``kafka-storage format -t`` takes: never starting with ``-``
(as Kafka's ``Uuid.randomUuid`` makes them), else the format fails before any broker test runs."""

from __future__ import annotations

import uuid

import pytest

from tests.kafka.broker import new_cluster_id


def test_no_cluster_id_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    draws = iter([uuid.UUID(bytes=b"\xfb" + bytes(15)), uuid.UUID(bytes=bytes(16))])  # "-w…", then "AAA…"
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    assert new_cluster_id() == "AAAAAAAAAAAAAAAAAAAAAA"
