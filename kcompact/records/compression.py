"""The four codecs of Kafka's log formats, framed as the broker writes and reads them (Kafka's ``Compression``).

Why a module of its own: a compressed v2 batch keeps its records after the 61-byte header as one
compressed stream, and a v0/v1 wrapper keeps its inner messages as its compressed value. Every such
batch the cleaner or a verify touches passes through :func:`decompress`, and every rewritten one
through :func:`compress`; the framing below is Kafka's, not the codec library's default.

Codec ids are the low three attribute bits: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd (v2 only).

gzip (RFC 1952): ``1f 8b 08 00 | mtime 00000000 | xfl 00 | os ff`` + raw deflate at level 6 + CRC-32
and size (both little-endian). JDK 17 writes OS = 0xff; CPython's ``gzip`` writes 0x03. Reading
accepts any header and concatenated members; bytes after a member that do not start another are
ignored, as ``GZIPInputStream`` does.

snappy, xerial framing (snappy-java's ``SnappyOutputStream``)::

    82 53 4e 41 50 50 59 00   magic "\\x82SNAPPY\\0"
    int32 BE                  version (1)
    int32 BE                  minimum compatible version (1)
    then per <= 32 KiB of input: int32 BE length + one raw snappy block

Input that does not start with the magic, or is shorter than 16 bytes, is one raw snappy block. A
second header may appear where a length is expected (concatenated streams); 1-3 stray bytes where a
length is expected end the stream, as in snappy-java.

lz4: Kafka's subset of LZ4 frame v1.5.1 (``Lz4BlockOutputStream``), with its XXH32 header
checksum; the framing and its wire layout live in :mod:`kcompact.records.lz4_framing`.

zstd: one standard frame per stream as Kafka's ``ZstdCompression`` writes it through zstd-jni's
streaming writer (level 3, content size not in the header, no checksum): the writer is flushed when the
batch closes (its data ends in blocks that are not last) and then ended, which adds an empty last block
(``01 00 00``); reading accepts any sequence of frames. A stream that is exactly one
frame of one block, or of one block and the empty last one (a batch of up to 128 KiB of records, the
usual case) is decompressed in one call
into a buffer of at most one block (or its stated content size); any other stream, and any that call
refuses, is fed to a streaming decompressor a step at a time, which also words every error.

Hostile input cannot exhaust memory: every decoder stops once the output would pass ``max_output``.
The codec libraries are imported on first use, so a missing one only matters when its codec is met.
"""

from __future__ import annotations

import importlib
import struct
import threading
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kcompact.errors import CorruptRecordError, UnsupportedFormatError

__all__ = [
    "CODEC_NAMES",
    "GZIP",
    "GZIP_HEADER",
    "GZIP_LEVEL",
    "GZIP_TRAILER_STRUCT",
    "LZ4",
    "NONE",
    "SNAPPY",
    "XERIAL_BLOCK_SIZE",
    "XERIAL_HEADER_STRUCT",
    "XERIAL_LENGTH_STRUCT",
    "XERIAL_MAGIC",
    "XERIAL_MAX_CHUNK",
    "XERIAL_VERSION",
    "ZSTD",
    "ZSTD_LEVEL",
    "block_compressors",
    "codec_loaded",
    "compress",
    "decompress",
]

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")

GZIP_LEVEL = 6
GZIP_HEADER = bytes.fromhex("1f8b0800" "00000000" "00" "ff")  # magic, CM, FLG, MTIME, XFL, OS
GZIP_TRAILER_STRUCT = struct.Struct(
    "<I"  # CRC-32 of the uncompressed data
    "I"  # ISIZE: uncompressed size mod 2**32
)
_GZIP_MEMBER_START = b"\x1f\x8b\x08"  # what makes trailing bytes another member (as the JDK)

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_VERSION = 1
XERIAL_HEADER_STRUCT = struct.Struct(
    ">8s"  # magic
    "i"  # version
    "i"  # minimum compatible version
)
XERIAL_LENGTH_STRUCT = struct.Struct(">i")  # compressed length of the raw snappy block that follows
XERIAL_BLOCK_SIZE = 32 * 1024
XERIAL_MAX_CHUNK = 512 * 1024 * 1024
_SNAPPY_MAX_RATIO = 32  # a 3-byte copy makes at most 64 bytes: no block inflates more than ~21x
_XERIAL_MAGIC_HEAD = XERIAL_LENGTH_STRUCT.unpack(XERIAL_MAGIC[:4])[0]

ZSTD_LEVEL = 3
_ZSTD_FEED = 64 * 1024  # compressed bytes handed to zstd per step
_ZSTD_MAX_RATIO = 32 * 1024  # a 4-byte RLE block can stand for 128 KiB
_ZSTD_BLOCK_MAX = 128 * 1024  # the most one block inflates to (RFC 8878 Block_Maximum_Size)
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_START_STRUCT = struct.Struct(
    "<I"  # magic
    "B"  # frame header descriptor
)
_ZSTD_BLOCK_HEADER_STRUCT = struct.Struct("<HB")  # a 3-byte little-endian block header
_ZSTD_EMPTY_LAST_BLOCK = b"\x01\x00\x00"  # Last_Block 1, Raw_Block, size 0: how Kafka's frames end
_ZSTD_MIN_FRAME = _ZSTD_START_STRUCT.size + _ZSTD_BLOCK_HEADER_STRUCT.size
_ZSTD_DICT_ID_SIZES = (0, 1, 2, 4)  # by the descriptor's low two bits
_ZSTD_CONTENT_SIZE_SIZES = (0, 2, 4, 8, 1, 2, 4, 8)  # by its top two bits, +4 when single segment

_M32 = 0xFFFFFFFF

_LIBRARIES = {SNAPPY: ("cramjam", "cramjam"), LZ4: ("lz4.block", "lz4"), ZSTD: ("zstandard",) * 2}
_loaded: dict[int, ModuleType] = {}
_per_thread = threading.local()  # zstd (de)compressor contexts: ~25 us to make, not thread-safe


def compress(codec: int, data: bytes | memoryview, *, magic: int = 2) -> bytes:
    """Compress ``data`` the way Kafka's producer and cleaner frame it for ``codec``.

    Args:
        codec: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
        data: the uncompressed bytes (v2 records, or v0/v1 inner entries).
        magic: the format the stream goes into; lz4 uses the broken header checksum for magic 0.

    Returns:
        The compressed stream (snappy: empty for empty input, like snappy-java).

    Raises:
        UnsupportedFormatError: an unknown codec, zstd with magic < 2, or a missing codec library.
    """
    _check_codec(codec, magic)
    view = memoryview(data).cast("B")
    if codec == NONE:
        return bytes(view)
    if codec == GZIP:
        deflater = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
        body = deflater.compress(view) + deflater.flush()
        return GZIP_HEADER + body + GZIP_TRAILER_STRUCT.pack(zlib.crc32(view), len(view) & _M32)
    if codec == SNAPPY:
        return _snappy_compress(view)
    if codec == LZ4:
        from kcompact.records.lz4_framing import encode_lz4_frame  # kept off a clean's start-up: lz4 data only

        return encode_lz4_frame(view, magic, _lz4_frame())
    zstd: Any = _library(ZSTD)
    writer = _zstd_context("compressor").compressobj()
    # ZstdCompression.wrapForOutput: a BufferedOutputStream over zstd-jni's ZstdOutputStreamNoFinalizer,
    # whose close() first flushes (the data ends a block that is not the frame's last), then ends the
    # frame with an empty last block; the cleaner rebuilds a batch through the same stream
    body = writer.compress(view) + writer.flush(zstd.COMPRESSOBJ_FLUSH_BLOCK)
    return bytes(body + writer.flush(zstd.COMPRESSOBJ_FLUSH_FINISH))


def decompress(
    codec: int, data: bytes | memoryview, *, magic: int = 2, max_output: int = 2**31
) -> bytes:
    """Decompress a stream the way Kafka's readers accept it.

    Args:
        codec: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
        data: the compressed stream.
        magic: the format it came from; lz4 header checksums are only verified for magic >= 1.
        max_output: the most bytes the result may hold; more means the stream is refused.

    Returns:
        The uncompressed bytes.

    Raises:
        CorruptRecordError: the stream is malformed, truncated, or inflates past ``max_output``
            (no path or position: the caller adds them).
        UnsupportedFormatError: an unknown codec, zstd with magic < 2, or a missing codec library.
    """
    _check_codec(codec, magic)
    view = memoryview(data).cast("B")
    if codec == NONE:
        _check_size(codec, len(view), max_output)
        return bytes(view)
    if codec == GZIP:
        return _gzip_decompress(view, max_output)
    if codec == SNAPPY:
        return _snappy_decompress(view, max_output)
    if codec == LZ4:
        from kcompact.records.lz4_framing import decode_lz4_frame  # kept off a clean's start-up: lz4 data only

        return decode_lz4_frame(view, magic, max_output, _library(LZ4))
    return _zstd_decompress(view, max_output)


def _check_codec(codec: int, magic: int) -> None:
    if not NONE <= codec <= ZSTD:
        raise UnsupportedFormatError(f"unknown compression codec; expected 0..4, found {codec}")
    if codec == ZSTD and magic < 2:
        raise UnsupportedFormatError(
            f"zstd compression in a magic {magic} message; expected magic 2, found {magic}"
        )


def _library(codec: int) -> ModuleType:
    module = _loaded.get(codec)
    if module is None:
        name, package = _LIBRARIES[codec]
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            raise UnsupportedFormatError(
                f"{CODEC_NAMES[codec]} data needs the Python package {package!r}; "
                f"install it with: pip install {package}"
            ) from err
        _loaded[codec] = module
    return module


def _lz4_frame() -> ModuleType:
    """``lz4.frame``, which writes the blocks as Kafka's (``lz4_framing._compress_block`` says why)."""
    _library(LZ4)  # the package, or the error naming it
    return importlib.import_module("lz4.frame")


def _corrupt(codec: int, reason: str) -> CorruptRecordError:
    return CorruptRecordError(f"{CODEC_NAMES[codec]} payload does not decompress: {reason}")


def _check_size(codec: int, size: int, max_output: int) -> None:
    if size > max_output:
        raise _corrupt(codec, f"output size; expected at most {max_output} bytes, found {size}")


def _gzip_decompress(view: memoryview, max_output: int) -> bytes:
    pieces: list[bytes] = []
    produced = 0
    rest: bytes | memoryview = view
    while True:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            piece = inflater.decompress(rest, max_output - produced + 1)
        except zlib.error as err:
            raise _corrupt(GZIP, str(err)) from err
        produced += len(piece)
        _check_size(GZIP, produced, max_output)
        if not inflater.eof:
            raise _corrupt(GZIP, f"stream truncated after {len(view)} bytes")
        pieces.append(piece)
        rest = inflater.unused_data
        if len(rest) < len(GZIP_HEADER) or not rest.startswith(_GZIP_MEMBER_START):
            return b"".join(pieces)


def _snappy_compress(view: memoryview) -> bytes:
    cramjam: Any = _library(SNAPPY)
    if not view:
        return b""
    parts = [XERIAL_HEADER_STRUCT.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_VERSION)]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(XERIAL_LENGTH_STRUCT.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(view: memoryview, max_output: int) -> bytes:
    cramjam: Any = _library(SNAPPY)
    if not view:
        raise _corrupt(SNAPPY, "empty input; expected a xerial stream or raw block, found 0 bytes")
    if len(view) < XERIAL_HEADER_STRUCT.size or view[:8] != XERIAL_MAGIC:
        blocks = [view]
    else:
        blocks = _xerial_blocks(view)
    try:
        sizes = [int(cramjam.snappy.decompress_raw_len(block)) for block in blocks]
        _check_size(SNAPPY, sum(sizes), max_output)
        for block, size in zip(blocks, sizes, strict=True):
            if size > _SNAPPY_MAX_RATIO * len(block):  # refuse before allocating, not after
                raise _corrupt(SNAPPY, f"block length; expected at most {_SNAPPY_MAX_RATIO} x "
                               f"{len(block)} compressed bytes, found {size}")
        out = bytearray(sum(sizes))
        position = 0
        for block, size in zip(blocks, sizes, strict=True):
            target = memoryview(out)[position : position + size]
            written = int(cramjam.snappy.decompress_raw_into(block, target))
            if written != size:
                raise _corrupt(SNAPPY, f"block length; expected {size} bytes, found {written}")
            position += size
    except cramjam.DecompressionError as err:
        raise _corrupt(SNAPPY, str(err)) from err
    return bytes(out)


def _xerial_blocks(view: memoryview) -> list[memoryview]:
    blocks: list[memoryview] = []
    position = XERIAL_HEADER_STRUCT.size
    _check_xerial_header(view, 0)
    while len(view) - position >= XERIAL_LENGTH_STRUCT.size:
        (length,) = XERIAL_LENGTH_STRUCT.unpack_from(view, position)
        if length == _XERIAL_MAGIC_HEAD:  # a concatenated stream starts here
            if len(view) - position < XERIAL_HEADER_STRUCT.size:
                raise _corrupt(SNAPPY, f"concatenated stream header at {position} truncated")
            if view[position : position + 8] != XERIAL_MAGIC:
                break
            _check_xerial_header(view, position)
            position += XERIAL_HEADER_STRUCT.size
            continue
        if not 0 <= length <= XERIAL_MAX_CHUNK:
            raise _corrupt(SNAPPY, f"chunk length; expected 0..{XERIAL_MAX_CHUNK}, found {length}")
        position += XERIAL_LENGTH_STRUCT.size
        if position + length > len(view):
            raise _corrupt(SNAPPY, f"chunk at {position} truncated; expected {length} "
                           f"bytes, found {len(view) - position}")
        blocks.append(view[position : position + length])
        position += length
    return blocks


def _check_xerial_header(view: memoryview, position: int) -> None:
    _, version, _ = XERIAL_HEADER_STRUCT.unpack_from(view, position)
    if version < XERIAL_VERSION:
        raise _corrupt(SNAPPY, f"xerial version; expected >= {XERIAL_VERSION}, found {version}")


def _zstd_decompress(view: memoryview, max_output: int) -> bytes:
    zstd: Any = _library(ZSTD)
    factory = _zstd_context("decompressor")
    bound = _zstd_one_block_bound(view, max_output)
    if bound:  # a batch's usual frame: one call into a buffer of at most ``bound`` bytes
        try:
            out: bytes = factory.decompress(view, max_output_size=bound)
        except zstd.ZstdError:
            pass  # more than the bound, or corrupt: the loop below says which
        else:
            _check_size(ZSTD, len(out), max_output)
            return out
    return _zstd_decompress_frames(view, max_output, factory, zstd.ZstdError)


def zstd_one_call() -> Any:
    """This thread's zstd decompressor's ``decompress`` method, which :func:`decompress` calls once,
    bounded, for a batch's usual stream (one frame of one block, or of one block and the empty last one
    Kafka writes, ``max_output_size`` from
    ``_zstd_one_block_bound``): for the C windows (``cleaner.round.accel``), which compute that bound
    themselves and run :func:`decompress` for anything else. None where zstandard is missing or not
    imported yet (a log with no zstd batch never imports it; the first zstd batch does, through
    :func:`decompress`)."""
    if ZSTD not in _loaded:
        return None
    return _zstd_context("decompressor").decompress


def codec_loaded(codec: int) -> bool:
    """Whether ``codec``'s library is imported (gzip's, zlib, always is): the C windows
    (``cleaner.round.accel``) decompress a snappy or lz4 batch's usual stream themselves only then, so a
    log's first batch of the codec still goes through :func:`decompress`, which imports it or says it is
    missing."""
    return codec == GZIP or codec in _loaded


def block_compressors() -> tuple[Callable[[bytes], Any] | None, Callable[[bytes], bytes] | None]:
    """snappy's raw block compressor (``cramjam.snappy.compress_raw``: one xerial chunk of at most 32 KiB) and
    lz4's one-block frame (``lz4_framing.one_block_frame``: one block of at most 64 KiB) exactly as
    :func:`compress` calls them, for the C windows (``cleaner.round.accel``), which frame the blocks
    themselves; None for a codec whose library is not imported yet (as :func:`codec_loaded`)."""
    snappy = _loaded[SNAPPY].snappy.compress_raw if SNAPPY in _loaded else None
    if LZ4 not in _loaded:
        return snappy, None
    from kcompact.records.lz4_framing import one_block_frame  # kept off a clean's start-up: lz4 data only

    return snappy, one_block_frame(_lz4_frame())


def zstd_library_version() -> int | None:
    """The loaded zstandard's libzstd version as ``ZSTD_versionNumber`` gives it (10506 for 1.5.6), or
    None where zstandard is missing or not imported yet (as :func:`zstd_one_call`): a compiled copy of the
    library may stand in for it only at this very version (the cleaner's output must stay byte-identical)."""
    if ZSTD not in _loaded:
        return None
    major, minor, release = _loaded[ZSTD].ZSTD_VERSION
    return int(major * 10_000 + minor * 100 + release)


def _zstd_one_block_bound(view: memoryview, max_output: int) -> int:
    """The output bound of a one-call decompression when ``view`` is exactly one zstd frame of one
    block (RFC 8878), or of one block and an empty last one (as Kafka's producer and cleaner write every
    zstd batch), 0 otherwise.

    One block inflates to at most ``_ZSTD_BLOCK_MAX`` bytes; a frame header that states its content
    size (allocated whole by the codec library) is eligible only when that size is within bounds.
    """
    if len(view) < _ZSTD_MIN_FRAME:
        return 0
    magic, descriptor = _ZSTD_START_STRUCT.unpack_from(view)
    single_segment = descriptor & 0x20
    size_field = _ZSTD_CONTENT_SIZE_SIZES[descriptor >> 6 | (4 if single_segment else 0)]
    header = 5 + (0 if single_segment else 1) + _ZSTD_DICT_ID_SIZES[descriptor & 3] + size_field
    if magic != _ZSTD_MAGIC or len(view) < header + 3:
        return 0
    low, high = _ZSTD_BLOCK_HEADER_STRUCT.unpack_from(view, header)
    block = low | high << 16  # Last_Block (bit 0), Block_Type (bits 1-2), Block_Size (bits 3-23)
    content = 1 if block & 6 == 2 else block >> 3  # an RLE block stores one byte
    checksum = 4 if descriptor & 4 else 0
    end = header + 3 + content
    if not block & 1:  # Kafka's own shape: the data's one block, then an empty last block
        if bytes(view[end : end + 3]) != _ZSTD_EMPTY_LAST_BLOCK:
            return 0
        end += 3
    if end + checksum != len(view):
        return 0  # more blocks or frames, or bytes after the frame: the loop
    bound = min(max_output, _ZSTD_BLOCK_MAX)
    if size_field:
        stated = int.from_bytes(view[header - size_field : header], "little")
        stated += 256 if size_field == 2 else 0
        return stated if 0 < stated <= bound else 0
    return bound


def _zstd_step(max_output: int, produced: int) -> int:
    """Compressed bytes to feed next: little enough that one step cannot inflate far past the bound."""
    return max(64, min(_ZSTD_FEED, (max_output - produced) // _ZSTD_MAX_RATIO + 1))


def _zstd_decompress_frames(view: memoryview, max_output: int, factory: Any, error: Any) -> bytes:
    pieces: list[bytes] = []
    produced, position = 0, 0
    reader = factory.decompressobj()
    try:
        while position < len(view):
            step = _zstd_step(max_output, produced)
            piece = reader.decompress(view[position : position + step])
            position = min(position + step, len(view))
            produced += len(piece)
            _check_size(ZSTD, produced, max_output)
            pieces.append(piece)
            if reader.eof and (reader.unused_data or position < len(view)):
                position -= len(reader.unused_data)  # the next frame starts there
                reader = factory.decompressobj()
    except error as err:
        raise _corrupt(ZSTD, str(err)) from err
    if not reader.eof:
        raise _corrupt(ZSTD, f"stream truncated after {len(view)} bytes")
    return b"".join(pieces)


def _zstd_context(kind: str) -> Any:
    context = getattr(_per_thread, kind, None)
    if context is None:
        zstd: Any = _library(ZSTD)
        if kind == "compressor":
            context = zstd.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=False)
        else:
            context = zstd.ZstdDecompressor()
        setattr(_per_thread, kind, context)
    return context
