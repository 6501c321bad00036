"""Kafka's lz4 framing: the subset of LZ4 frame v1.5.1 its brokers write and read (``Lz4BlockOutputStream``,
``Lz4BlockInputStream``).

Why a module of its own: the ``lz4`` library compresses the blocks; the frame around them (magic,
descriptor, header checksum, block size words, end mark) is Kafka's ``Lz4BlockOutputStream`` /
``Lz4BlockInputStream``, including the magic 0 header checksum bug, and it needs the XXH32 hash.
:mod:`kcompact.records.compression` loads the block codec and calls in here; this module never
imports a codec library itself. Layout (little-endian)::

    04 22 4d 18    magic 0x184D2204
    60             FLG: version 01, independent blocks, no checksums, no content size
    40             BD: maximum block size code 4 (64 KiB)
    HC             (xxh32(FLG BD [content size], seed 0) >> 8) & 0xff
                   -- magic 0 (KAFKA-3160): xxh32 over magic+FLG+BD, never verified on read
    per block:     uint32 size (bit 31 set: stored uncompressed) + data [+ uint32 xxh32 if flagged]
    00 00 00 00    end mark [+ uint32 content checksum if flagged: read, not verified]

Hostile input cannot exhaust memory: decoding stops once the output would pass ``max_output``.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Any

import xxhash

from kcompact.errors import CorruptRecordError

LZ4_MAGIC = 0x184D2204
LZ4_FRAME_STRUCT = struct.Struct(
    "<I"  # magic
    "B"  # FLG
    "B"  # BD
)
LZ4_U32_STRUCT = struct.Struct("<I")  # block size word, end mark, block and content checksums
LZ4_FLG = 0x60  # version 01, block independence
LZ4_BD = 0x40  # block maximum size code 4
LZ4_BLOCK_SIZE = 64 * 1024
LZ4_STORED = 0x80000000  # block size bit: the data is stored, not compressed
_ONE_BLOCK_FRAME_HEADER = LZ4_FRAME_STRUCT.size + 1  # lz4.frame's header: no content size, no dictionary
_FLG_VERSION_SHIFT = 6
_FLG_INDEPENDENT = 0x20
_FLG_BLOCK_CHECKSUM = 0x10
_FLG_CONTENT_SIZE = 0x08
_FLG_CONTENT_CHECKSUM = 0x04
_FLG_RESERVED = 0x03
_BD_RESERVED = 0x8F

def xxh32(data: bytes | memoryview, seed: int = 0) -> int:
    """XXH32 of ``data`` (LZ4 header and block checksums), from the ``xxhash`` package.

    Args:
        data: the bytes to hash.
        seed: the hash seed (LZ4 uses 0).

    Returns:
        The 32-bit hash; ``xxh32(b"") == 0x02CC5D05``.
    """
    return int(xxhash.xxh32_intdigest(data, seed))


def encode_lz4_frame(view: memoryview, magic: int, frame_codec: Any) -> bytes:
    """Frame ``view`` as Kafka's ``Lz4BlockOutputStream`` does: 64 KiB independent blocks.

    Args:
        view: the uncompressed bytes, as a byte-format memoryview.
        magic: the format the stream goes into; magic 0 gets the broken header checksum.
        frame_codec: the ``lz4.frame`` module (loaded by the caller), whose blocks are Kafka's.

    Returns:
        The frame; a block that does not shrink is stored uncompressed.
    """
    header = LZ4_FRAME_STRUCT.pack(LZ4_MAGIC, LZ4_FLG, LZ4_BD)
    checksum = xxh32(header if magic == 0 else header[4:]) >> 8 & 0xFF
    parts = [header, bytes((checksum,))]
    for start in range(0, len(view), LZ4_BLOCK_SIZE):
        word, data = _compress_block(view[start : start + LZ4_BLOCK_SIZE], frame_codec)
        parts += (LZ4_U32_STRUCT.pack(word), data)
    parts.append(LZ4_U32_STRUCT.pack(0))
    return b"".join(parts)


def _compress_block(raw: memoryview, frame_codec: Any) -> tuple[int, bytes]:
    """One block as ``Lz4BlockOutputStream.writeBlock`` writes it: its size word and its data.

    Kafka compresses each block with lz4-java's ``fastCompressor`` (liblz4's ``LZ4_compress_default``
    from a fresh state) and stores it raw when that does not shrink it. ``lz4.block.compress`` gives other
    bytes on most inputs (198 of 260 sampled batches' records), so a rebuilt batch would not be Kafka's;
    a frame of independent blocks at level 0 compresses each block from a fresh state and stores it raw on
    the same rule, so the block is taken out of a one-block frame of its own.
    """
    frame = one_block_frame(frame_codec)(raw)
    (word,) = LZ4_U32_STRUCT.unpack_from(frame, _ONE_BLOCK_FRAME_HEADER)
    start = _ONE_BLOCK_FRAME_HEADER + LZ4_U32_STRUCT.size
    return word, bytes(frame[start : start + (word & ~LZ4_STORED)])


def one_block_frame(frame_codec: Any) -> Callable[[bytes | memoryview], bytes]:
    """``frame_codec.compress`` (``lz4.frame``'s) as :func:`_compress_block` calls it for one block of at most
    64 KiB: a frame whose 7-byte header is followed by the block's size word and data, then the end mark. The
    C windows (``cleaner/round/_windows_codecs.c``) call it too and take the block out the same way."""
    return functools.partial(
        frame_codec.compress, block_size=frame_codec.BLOCKSIZE_MAX64KB, block_linked=False, block_checksum=False,
        content_checksum=False, store_size=False, compression_level=0,
    )


def decode_lz4_frame(view: memoryview, magic: int, max_output: int, block_codec: Any) -> bytes:
    """Unframe and decompress one lz4 frame the way Kafka's ``Lz4BlockInputStream`` accepts it.

    Args:
        view: the frame, as a byte-format memoryview.
        magic: the format it came from; the header checksum is only verified for magic >= 1.
        max_output: the most bytes the result may hold; more means the frame is refused.
        block_codec: the ``lz4.block`` module (loaded by the caller).

    Returns:
        The uncompressed bytes.

    Raises:
        CorruptRecordError: the frame is malformed, truncated, or inflates past ``max_output``.
    """
    flg, max_block, position = _read_header(view, magic)
    pieces: list[bytes] = []
    produced = 0
    while True:
        size = _read_u32(view, position, "block size")
        stored, size = size & LZ4_STORED, size & ~LZ4_STORED
        position += 4
        if size == 0:
            if flg & _FLG_CONTENT_CHECKSUM:
                _read_u32(view, position, "content checksum")
            return b"".join(pieces)
        if size > max_block:
            raise _corrupt(f"block size; expected at most {max_block}, found {size}")
        block = view[position : position + size]
        if len(block) < size:
            raise _corrupt(f"block at {position} truncated; expected {size} bytes, "
                           f"found {len(block)}")
        position += size
        if flg & _FLG_BLOCK_CHECKSUM and _read_u32(view, position, "block checksum") != xxh32(block):
            raise _corrupt(f"block checksum mismatch at {position}")
        position += 4 if flg & _FLG_BLOCK_CHECKSUM else 0
        try:
            piece = (block.tobytes() if stored
                     else block_codec.decompress(block, uncompressed_size=max_block))
        except block_codec.LZ4BlockError as err:
            raise _corrupt(str(err)) from err
        produced += len(piece)
        if produced > max_output:
            raise _corrupt(f"output size; expected at most {max_output} bytes, found {produced}")
        pieces.append(piece)


def _read_header(view: memoryview, magic: int) -> tuple[int, int, int]:
    """Check the frame descriptor; return (FLG, maximum block size, position of the first block)."""
    if len(view) < LZ4_FRAME_STRUCT.size:
        raise _corrupt(f"frame header; expected 7 bytes, found {len(view)}")
    frame_magic, flg, bd = LZ4_FRAME_STRUCT.unpack_from(view)
    if frame_magic != LZ4_MAGIC:
        raise _corrupt(f"frame magic; expected 0x{LZ4_MAGIC:08x}, found 0x{frame_magic:08x}")
    if flg >> _FLG_VERSION_SHIFT != 1:
        raise _corrupt(f"frame version; expected 1, found {flg >> _FLG_VERSION_SHIFT}")
    if flg & _FLG_RESERVED:
        raise _corrupt(f"FLG reserved bits (dictionary id); expected 0, found 0x{flg:02x}")
    if not flg & _FLG_INDEPENDENT:
        raise _corrupt("dependent block stream is unsupported; expected independent blocks")
    if bd & _BD_RESERVED or not 4 <= bd >> 4 <= 7:
        raise _corrupt(f"BD byte; expected size code 4..7, reserved bits 0, found 0x{bd:02x}")
    descriptor_end = LZ4_FRAME_STRUCT.size + (8 if flg & _FLG_CONTENT_SIZE else 0)
    if len(view) <= descriptor_end:
        raise _corrupt(f"frame header; expected {descriptor_end + 1} bytes, found {len(view)}")
    if magic >= 1:
        expected = xxh32(view[4:descriptor_end]) >> 8 & 0xFF
        if view[descriptor_end] != expected:
            raise _corrupt(f"frame descriptor corrupted: header checksum; expected "
                           f"0x{expected:02x}, found 0x{view[descriptor_end]:02x}")
    return flg, 1 << (2 * (bd >> 4) + 8), descriptor_end + 1


def _read_u32(view: memoryview, position: int, what: str) -> int:
    if len(view) - position < 4:
        raise _corrupt(f"stream ended prematurely: {what} at {position}; expected 4 bytes, "
                       f"found {max(len(view) - position, 0)}")
    value: int = LZ4_U32_STRUCT.unpack_from(view, position)[0]
    return value


def _corrupt(reason: str) -> CorruptRecordError:
    # Same message shape as every codec in compression.py ("<codec> payload does not decompress").
    return CorruptRecordError(f"lz4 payload does not decompress: {reason}")
