"""server.properties parsing follows java.util.Properties.load, plus the log-dir/node-id helpers."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.config.server_properties import (
    decode_properties,
    log_dirs,
    metadata_log_dir,
    node_id,
    read_server_properties,
)
from kcompact.errors import ConfigError
from tests.conftest import real_fixture

SAMPLE = (
    "# Licensed to the Apache Software Foundation\n"
    "! bang comment \\\n"
    "process.roles=broker,controller\n"
    "node.id = 1\n"
    "   log.dirs:/var/lib/kafka/data,\\\n"
    "            /mnt/second\n"
    "listeners PLAINTEXT://:9092\n"
    "key\\ with\\=odd\\:chars=v\n"
    "tab\\tvalue=a\\tb\\nc\n"
    "unicode=caf\\u00e9\r\n"
    "empty=\n"
    "\n"
    "  \t \n"
    "only.key\n"
    "a==b\n"
    "c = = d\n"
    "node.id=2\r"
    "log.retention.hours=168\\\\\n"
    "trailing.backslash=x\\"
)


def test_decode_properties_follows_java_grammar() -> None:
    props = decode_properties(SAMPLE)
    assert props == {
        "process.roles": "broker,controller",
        "node.id": "2",
        "log.dirs": "/var/lib/kafka/data,/mnt/second",
        "listeners": "PLAINTEXT://:9092",
        "key with=odd:chars": "v",
        "tab\tvalue": "a\tb\nc",
        "unicode": "café",
        "empty": "",
        "only.key": "",
        "a": "=b",
        "c": "= d",
        "log.retention.hours": "168\\",
        "trailing.backslash": "x",
    }


def test_comment_line_never_continues_and_continuation_is_not_a_comment() -> None:
    assert decode_properties("# comment \\\nk=v\nx=1\\\n#not a comment\n") == {
        "k": "v",
        "x": "1#not a comment",
    }


def test_malformed_unicode_escape_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"malformed \\uXXXX escape; expected 4 hex digits"):
        decode_properties("k=\\u12G4\n")


_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=20)


def _escape(text: str, is_key: bool) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch in "\\=:#!" or (ch == " " and (is_key or i == 0)):
            out.append("\\" + ch)
        elif ord(ch) > 0x7E:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


@given(st.dictionaries(_TEXT.filter(bool), _TEXT, max_size=5))
def test_escaped_entries_round_trip(entries: dict[str, str]) -> None:
    text = "".join(f"{_escape(k, True)}={_escape(v, False)}\n" for k, v in entries.items())
    assert decode_properties(text) == entries


def test_read_server_properties_is_latin1_and_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes(b"log.dir=/data/k\xe9\nnode.id=3\n")
    assert read_server_properties(path) == {"log.dir": "/data/ké", "node.id": "3"}
    with pytest.raises(ConfigError, match="missing.properties: cannot read properties file"):
        read_server_properties(tmp_path / "missing.properties")
    path.write_text("k=\\u00\n")
    with pytest.raises(ConfigError, match=r"server.properties: properties entry 1: malformed"):
        read_server_properties(path)


def test_log_dirs_prefers_log_dirs_over_log_dir() -> None:
    assert log_dirs({"log.dirs": " /a , /b,", "log.dir": "/c"}) == ["/a", "/b"]
    assert log_dirs({"log.dir": "/c"}) == ["/c"]
    assert log_dirs({}) == ["/tmp/kafka-logs"]
    with pytest.raises(ConfigError, match="log.dirs: no log directory"):
        log_dirs({"log.dirs": " , "})


def test_metadata_log_dir_defaults_to_first_log_dir() -> None:
    assert metadata_log_dir({"log.dirs": "/a,/b"}) == "/a"
    assert metadata_log_dir({"log.dirs": "/a,/b", "metadata.log.dir": "/meta"}) == "/meta"


def test_node_id() -> None:
    assert node_id({"node.id": " 7 "}) == 7
    assert node_id({"broker.id": "4"}) == 4
    assert node_id({}) is None
    with pytest.raises(ConfigError, match="node.id=x: not a valid int"):
        node_id({"node.id": "x"})


def test_cached_read_sees_a_changed_file(tmp_path: Path) -> None:
    from kcompact.config.server_properties import read_server_properties_cached

    path = tmp_path / "server.properties"
    path.write_text("node.id=1\n")
    first = read_server_properties_cached(path)
    first["node.id"] = "changed by the caller"
    assert read_server_properties_cached(path) == {"node.id": "1"}
    path.write_text("node.id=22\n")
    assert read_server_properties_cached(path) == {"node.id": "22"}
    with pytest.raises(ConfigError, match="absent.properties: cannot read properties file"):
        read_server_properties_cached(tmp_path / "absent.properties")


# meta.properties is a Java properties file too (written by Properties.store)


def test_real_meta_properties() -> None:
    kraft = read_server_properties(real_fixture("kraft37-cleaned-logdir", "meta.properties"))
    assert kraft == {
        "cluster.id": "0wHLXdrKStejkyBzi8qBEw",
        "directory.id": "yYuMrFRVQVSX0VVQPcMSrA",
        "node.id": "1",
        "version": "1",
    }
    zookeeper = read_server_properties(real_fixture("confluent512-lz4-logdir", "meta.properties"))
    assert zookeeper == {"version": "0", "broker.id": "1001"}


def test_java_properties_grammar(tmp_path: Path) -> None:
    path = tmp_path / "x.properties"
    path.write_bytes(
        b"# comment\n"
        b"! also a comment\n"
        b"   \n"
        b"a=1\n"
        b"b : 2\n"
        b"c 3\n"
        b"  d\t=\t4  \n"  # leading blanks dropped, trailing kept
        b"e==5\n"
        b"key\\ with\\:colon = v\n"
        b"long = one, \\\n"
        b"       two\n"
        b"esc = tab\\tnl\\nu\\u00e9x\\q\n"
        b"empty\n"
        b"latin1 = caf\xe9\n"
        b"a = again\r\n"
        b"last = trailing backslash \\"
    )
    assert read_server_properties(path) == {
        "a": "again",
        "b": "2",
        "c": "3",
        "d": "4  ",
        "e": "=5",
        "key with:colon": "v",
        "long": "one, two",
        "esc": "tab\tnl\nu\u00e9xq",
        "empty": "",
        "latin1": "caf\u00e9",
        "last": "trailing backslash ",
    }


def test_comment_continuation_and_escaped_backslash(tmp_path: Path) -> None:
    path = tmp_path / "x.properties"
    path.write_bytes(b"# comment \\\nnot.a.comment = yes\npath = C:\\\\dir\\\\\n")
    assert read_server_properties(path) == {"not.a.comment": "yes", "path": "C:\\dir\\"}


def test_malformed_unicode_escape_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    path.write_bytes(b"a = \\u12g4\n")
    with pytest.raises(
        ConfigError, match=r"meta.properties: properties entry 1: malformed \\uXXXX escape; expected 4 hex"
    ):
        read_server_properties(path)
