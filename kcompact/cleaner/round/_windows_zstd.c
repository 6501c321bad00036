/*
 * kcompact/cleaner/round/_windows_zstd.c -- the round's windows' zstd (part of the
 * kcompact.cleaner.round._windows extension, with _windows.c): a zstd batch's records decompressed and
 * its rebuilt records compressed with the vendored Zstandard (kcompact/_vendor/zstd, the very library
 * python-zstandard compiles in), one reused context each, exactly as python-zstandard's calls in
 * records/compression.py do; the Python wrapper uses them only while the versions agree
 * (cleaner/round/accel.py zstd_codec). Every function here says what the Python path does instead.
 */
#include "_windows_zstd.h"


/* records.compression._zstd_one_block_bound (max_output 2**31): the output bound of one
 * decompression call when p[0, n) is exactly one zstd frame of one block (or of one block and an empty
 * last one, as Kafka writes them), 0 otherwise. */
Py_ssize_t
zstd_one_block_bound(const uint8_t *p, Py_ssize_t n)
{
    static const int dict_id_sizes[4] = {0, 1, 2, 4};
    static const int content_size_sizes[8] = {0, 2, 4, 8, 1, 2, 4, 8};
    uint32_t magic, block;
    int single, size_field, checksum;
    Py_ssize_t header, content, end;
    if (n < 5 + 3)
        return 0;
    magic = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    single = (p[4] & 0x20) != 0;
    size_field = content_size_sizes[(p[4] >> 6) | (single ? 4 : 0)];
    header = 5 + (single ? 0 : 1) + dict_id_sizes[p[4] & 3] + size_field;
    if (magic != ZSTD_FRAME_MAGIC || n < header + 3)
        return 0;
    block = (uint32_t)p[header] | (uint32_t)p[header + 1] << 8 | (uint32_t)p[header + 2] << 16;
    content = (block & 6) == 2 ? 1 : (Py_ssize_t)(block >> 3);  /* an RLE block stores one byte */
    checksum = (p[4] & 4) ? 4 : 0;
    end = header + 3 + content;
    if (!(block & 1)) {  /* Kafka's own shape: the data's one block, then an empty last block 01 00 00 */
        if (n < end + 3 || p[end] != 1 || p[end + 1] != 0 || p[end + 2] != 0)
            return 0;
        end += 3;
    }
    if (end + checksum != n)
        return 0;  /* more blocks or frames, or bytes after the frame */
    if (size_field) {
        uint64_t stated = 0;
        for (int k = size_field - 1; k >= 0; k--)
            stated = stated << 8 | p[header - size_field + k];
        if (size_field == 2)
            stated += 256;
        return stated > 0 && stated <= ZSTD_BLOCK_MAX ? (Py_ssize_t)stated : 0;
    }
    return ZSTD_BLOCK_MAX;
}

/* zstd(view, max_output_size=bound): records.compression._zstd_decompress's one bounded call, made
 * here without its Python frames. A new bytes object, or NULL: nothing set where the call raised an
 * ordinary error or returned no bytes (the caller then runs the whole reference), else an error. */
PyObject *
zstd_one_call(PyObject *zstd_fn, PyObject *view, Py_ssize_t bound)
{
    static PyObject *kwnames = NULL;
    PyObject *args[2], *value;
    if (kwnames == NULL && (kwnames = Py_BuildValue("(s)", "max_output_size")) == NULL)
        return NULL;
    args[0] = view;
    args[1] = PyLong_FromSsize_t(bound);
    if (args[1] == NULL)
        return NULL;
    value = PyObject_Vectorcall(zstd_fn, args, 1, kwnames);
    Py_DECREF(args[1]);
    if (value == NULL) {
        if (PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_MemoryError))
            PyErr_Clear();
        return NULL;
    }
    if (!PyBytes_Check(value) || PyBytes_GET_SIZE(value) > bound) {
        Py_DECREF(value);
        return NULL;
    }
    return value;
}

/* The output bound of the vendored library's one streaming call when p[0, n) is exactly one zstd frame
 * (RFC 8878) of any number of blocks: its stated content size, or the sum of its blocks' bounds (a raw or
 * RLE block's size, ZSTD_BLOCK_MAX for a compressed one); 0 when it is not one whole frame or its bound
 * passes ZSTD_FRAME_MAX (the Python path then takes it, and words any error). */
Py_ssize_t
zstd_frame_bound(const uint8_t *p, Py_ssize_t n)
{
    static const int dict_id_sizes[4] = {0, 1, 2, 4};
    static const int content_size_sizes[8] = {0, 2, 4, 8, 1, 2, 4, 8};
    int single, size_field;
    Py_ssize_t at, bound = 0;
    if (n < 5 + 3 || ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16
                      | (uint32_t)p[3] << 24) != ZSTD_FRAME_MAGIC)
        return 0;
    single = (p[4] & 0x20) != 0;
    size_field = content_size_sizes[(p[4] >> 6) | (single ? 4 : 0)];
    at = 5 + (single ? 0 : 1) + dict_id_sizes[p[4] & 3] + size_field;
    for (;;) {
        uint32_t block;
        Py_ssize_t size;
        if (n - at < 3)
            return 0;
        block = (uint32_t)p[at] | (uint32_t)p[at + 1] << 8 | (uint32_t)p[at + 2] << 16;
        size = (Py_ssize_t)(block >> 3);
        if ((block & 6) == 6)
            return 0;  /* reserved block type */
        bound += (block & 6) == 4 ? ZSTD_BLOCK_MAX : size;
        at += 3 + ((block & 6) == 2 ? 1 : size);
        if (at > n || bound > ZSTD_FRAME_MAX)
            return 0;
        if (block & 1)
            break;
    }
    if (at + ((p[4] & 4) ? 4 : 0) != n)
        return 0;  /* more frames, or bytes after the frame */
    if (size_field) {
        uint64_t stated = 0;
        Py_ssize_t header = 5 + (single ? 0 : 1) + dict_id_sizes[p[4] & 3] + size_field;
        for (int k = size_field - 1; k >= 0; k--)
            stated = stated << 8 | p[header - size_field + k];
        if (size_field == 2)
            stated += 256;
        return stated > 0 && stated <= ZSTD_FRAME_MAX ? (Py_ssize_t)stated : 0;
    }
    return bound;
}

/* One compression and one decompression context per thread, made on first use and reused by every batch
 * that thread reads or writes: the kernels use them with the GIL released (a round's threads filter
 * chunks at once, cleaner/workers/parallel.py), so no two threads share one; a forked worker has its own
 * copy. */
static __thread ZSTD_CCtx *zstd_cctx;
static __thread ZSTD_DCtx *zstd_dctx;

/* Where the vendored library (and _windows_codecs.c's gzip, snappy and lz4) decompresses to: one buffer per
 * thread reused by every batch (no allocation, no fresh pages a batch), PyMem_Raw (used without the GIL),
 * given back when a frame made it large (zstd_scratch_trim). */
__thread Grow zstd_scratch;

void
zstd_scratch_trim(void)
{
    if (zstd_scratch.capacity > (1 << 20)) {
        PyMem_RawFree(zstd_scratch.data);
        zstd_scratch.data = NULL;
        zstd_scratch.capacity = 0;
    }
}

/* Whether the window p's frame header asks for is within what a streaming decompressor with the library's
 * default limit takes (ZSTD_WINDOWLOG_LIMIT_DEFAULT: 2**27 bytes; python-zstandard's ZstdDecompressor and
 * Kafka's zstd-jni stream refuse a frame beyond it), read from the header zstd_frame_bound checked: the
 * window descriptor, or for a single-segment frame its content size (RFC 8878 3.1.1.1.2). */
static int
zstd_window_ok(const uint8_t *p, unsigned long long stated)
{
    unsigned long long window;
    if (p[4] & 0x20)  /* single segment: the window is the content */
        return stated != ZSTD_CONTENTSIZE_UNKNOWN && stated <= (1ull << 27);
    window = 1ull << (10 + (p[5] >> 3));
    window += (window >> 3) * (p[5] & 7);
    return window <= (1ull << 27);
}

/* python-zstandard's ZstdDecompressor().decompress(p[0, n), max_output_size=bound) done with the vendored
 * library into dst[0, bound), where zstd_frame_bound said p[0, n) is one whole frame and `bound` holds it (its
 * stated content size, or its blocks' bound): the same bytes as the one ZSTD_decompressStream call of
 * python-zstandard's c-ext/decompressor.c, made with the one-shot ZSTD_decompressDCtx, which writes the
 * blocks straight into dst (the stream decodes into its own window buffer and copies out of it), the
 * stream's window limit checked first. The length, or -1: refused (the caller runs the Python path, which
 * words the error). */
Py_ssize_t
zstd_native_into(const uint8_t *p, Py_ssize_t n, Py_ssize_t bound, void *dst)
{
    unsigned long long stated;
    size_t got;
    if (zstd_dctx == NULL && (zstd_dctx = ZSTD_createDCtx()) == NULL)
        return -1;
    stated = ZSTD_getFrameContentSize(p, (size_t)n);
    if (stated == ZSTD_CONTENTSIZE_ERROR || stated == 0 || !zstd_window_ok(p, stated))
        return -1;
    got = ZSTD_decompressDCtx(zstd_dctx, dst, (size_t)bound, p, (size_t)n);
    if (ZSTD_isError(got) || (stated != ZSTD_CONTENTSIZE_UNKNOWN && got != stated))
        return -1;
    return (Py_ssize_t)got;
}

/* zstd_native_into zstd_scratch (no GIL needed): the length, -1 refused, or -2 out of memory (nothing set
 * either way). */
Py_ssize_t
zstd_native_into_scratch(const uint8_t *p, Py_ssize_t n, Py_ssize_t bound)
{
    zstd_scratch.size = 0;
    if (grow_raw(&zstd_scratch, bound) < 0)
        return -2;
    return zstd_native_into(p, n, bound, zstd_scratch.data);
}

/* zstd_native_into a new bytes object of `bound` bytes, then cut to the records' size (the bytes are
 * decompressed where they stay: no copy out of a scratch buffer), or NULL (an error set or not, as
 * zstd_native_into says). */
PyObject *
zstd_native_decompress(const uint8_t *p, Py_ssize_t n, Py_ssize_t bound)
{
    PyObject *value = PyBytes_FromStringAndSize(NULL, bound);
    Py_ssize_t got;
    if (value == NULL)
        return NULL;
    got = zstd_native_into(p, n, bound, PyBytes_AS_STRING(value));
    if (got < 0) {
        Py_DECREF(value);
        return NULL;
    }
    if (got < bound && _PyBytes_Resize(&value, got) < 0)
        return NULL;
    return value;
}

/* records.compression.compress(ZSTD, p[0, n)) done with the vendored library and this thread's
 * compression context, as python-zstandard's ZstdCompressor(level=3, write_content_size=False) runs it
 * (its c-ext/compressor.c and compressobj.c: compressobj() resets the session with the source size
 * unknown; compress() is ZSTD_e_continue, flush(COMPRESSOBJ_FLUSH_BLOCK) ZSTD_e_flush,
 * flush(COMPRESSOBJ_FLUSH_FINISH) ZSTD_e_end): Kafka's frame, its data in blocks that are not the last,
 * then an empty last block; appended to dst (grow_raw: no GIL needed). Its length, -1 where the library
 * refused, or -2 out of memory (nothing set either way, dst's size unchanged). */
Py_ssize_t
zstd_native_compress_into(Grow *dst, const uint8_t *p, Py_ssize_t n)
{
    static const ZSTD_EndDirective steps[3] = {ZSTD_e_continue, ZSTD_e_flush, ZSTD_e_end};
    ZSTD_inBuffer in = {p, (size_t)n, 0};
    ZSTD_outBuffer out;
    size_t capacity = ZSTD_compressBound((size_t)n) + 64, left = 0;
    if (zstd_cctx == NULL) {
        if ((zstd_cctx = ZSTD_createCCtx()) == NULL)
            return -2;
        if (ZSTD_isError(ZSTD_CCtx_setParameter(zstd_cctx, ZSTD_c_compressionLevel, 3))
            || ZSTD_isError(ZSTD_CCtx_setParameter(zstd_cctx, ZSTD_c_contentSizeFlag, 0))
            || ZSTD_isError(ZSTD_CCtx_setParameter(zstd_cctx, ZSTD_c_checksumFlag, 0))
            || ZSTD_isError(ZSTD_CCtx_setParameter(zstd_cctx, ZSTD_c_dictIDFlag, 1))) {
            ZSTD_freeCCtx(zstd_cctx);
            zstd_cctx = NULL;
            return -1;
        }
    }
    ZSTD_CCtx_reset(zstd_cctx, ZSTD_reset_session_only);
    if (ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(zstd_cctx, ZSTD_CONTENTSIZE_UNKNOWN)))
        return -1;
    if (grow_raw(dst, (Py_ssize_t)capacity) < 0)
        return -2;
    out.dst = dst->data + dst->size;
    out.size = capacity;
    out.pos = 0;
    for (int step = 0; step < 3; step++) {
        ZSTD_inBuffer *source = step == 0 ? &in : &(ZSTD_inBuffer){NULL, 0, 0};
        do {
            left = ZSTD_compressStream2(zstd_cctx, &out, source, steps[step]);
            /* the bound holds every byte: a call that leaves output behind is a library refusal */
        } while (!ZSTD_isError(left) && step == 0 && source->pos < source->size && out.pos < out.size);
        if (ZSTD_isError(left) || (step == 0 && in.pos != in.size) || (step > 0 && left != 0))
            return -1;
    }
    dst->size += (Py_ssize_t)out.pos;
    return (Py_ssize_t)out.pos;
}

const char zstd_version_doc[] =
    "zstd_version() -> int\n\n"
    "The vendored Zstandard's version number (ZSTD_versionNumber(): 10506 for 1.5.6).";

PyObject *
zstd_version(PyObject *module, PyObject *unused)
{
    return PyLong_FromUnsignedLong(ZSTD_versionNumber());
}
