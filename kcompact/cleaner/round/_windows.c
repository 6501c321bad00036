/*
 * kcompact.cleaner.round._windows -- the round's compiled windows: pass 1 over a run of plain data
 * batches (scan_window_key_digests: every kept key's offset and digest), and pass 2's read and write
 * of a run (scan_window_records, then emit_window).
 *
 * Why here: a window is the round's unit of work (several batches, their decisions, the output batches
 * written back to back), so these kernels sit beside the Python that drives them
 * (kcompact/cleaner/round/mapping.py and filter_windows.py, through kcompact/cleaner/round/accel.py).
 * They read each batch's records with the scan's own walks (kcompact/records/scan/walk.h), the layer
 * below; the per-batch Python walk stays the reference. The contract (a result exactly the
 * reference's, or ScanError and the reference runs) is common.h's.
 */
#include "common.h"
#include "walk.h"
#include "_windows_zstd.h"  /* zstd batches with the vendored library */
#include "_windows_codecs.h"  /* gzip, snappy and lz4 batches; pass 1's inflated payloads for pass 2 */

PyObject *kcompact_scan_error;  /* kcompact.cleaner.round._windows.ScanError (common.h) */

/* The GIL while a kernel walks a window: released over its C-only stretches (framing, CRC-32C, record
 * walks, the vendored zstd, gzip, snappy and lz4 in C, the output's copy), so that other threads run
 * meanwhile (a round's threads filter chunks at once: cleaner/workers/parallel.py), and held again for every
 * Python call (a codec through records.compression, a bytes object made). Buffers the released stretches
 * grow are PyMem_Raw's (grow_raw); what they share across threads (the codec contexts and the scratch) is
 * per thread, but for pass 1's kept payloads (_windows_codecs.c: under their own lock). */
typedef struct {
    PyThreadState *saved;  /* NULL: held */
} Gil;

static inline void
gil_release(Gil *g)
{
    if (g->saved == NULL)
        g->saved = PyEval_SaveThread();
}

static inline void
gil_hold(Gil *g)
{
    if (g->saved != NULL) {
        PyEval_RestoreThread(g->saved);
        g->saved = NULL;
    }
}

/* ---- scan_window_key_digests: pass 1 over a run of plain batches ------------------------------ */

#define CODEC_MASK 0x07
#define MAX_CODEC 4  /* zstd */

/* A compressed batch's records through the caller's decompress(codec, payload) (the reference's
 * records_bytes) — for zstd's usual stream (one frame of one block) first through zstd_one_call with
 * the caller's zstd (a zstandard decompressor's decompress method, or NULL) — the payload bytes [start, start + n) of `source` handed over as a slice of it (a
 * view the source knows of: an mmap stays mapped while the function, or an error it raised, still
 * holds it): 1 with *out a new bytes object; 0 where it raised an ordinary error (the caller's
 * per-batch walk then raises it with its location), nothing set; -1 with a Python error set for
 * anything else (out of memory within the kernel, an interrupt). *whole: the caller's memoryview of
 * the source, made here at its first compressed batch (the caller releases it). */
#define ZSTD_CODEC 4

static int
decompressed(PyObject *fn, PyObject *zstd_fn, int codec, PyObject *source, PyObject **whole,
             Py_ssize_t start, Py_ssize_t n, PyObject **out)
{
    PyObject *view, *args[2], *value, *code;
    *out = NULL;
    if (codec == ZSTD_CODEC && zstd_fn == Py_True) {  /* the vendored library, python-zstandard's own */
        Py_buffer whole_buffer;
        Py_ssize_t bound = 0;
        if (PyObject_GetBuffer(source, &whole_buffer, PyBUF_SIMPLE) < 0)
            return -1;
        if (start >= 0 && start + n <= whole_buffer.len) {
            const uint8_t *payload = (const uint8_t *)whole_buffer.buf + start;
            bound = zstd_frame_bound(payload, n);
            if (bound > 0)
                *out = zstd_native_decompress(payload, n, bound);
        }
        PyBuffer_Release(&whole_buffer);
        if (*out != NULL)
            return 1;
        if (PyErr_Occurred())
            return -1;
        zstd_fn = NULL;  /* refused, or not the usual stream: the Python path says why */
    }
    if (*whole == NULL && (*whole = PyMemoryView_FromObject(source)) == NULL)
        return -1;
    view = PySequence_GetSlice(*whole, start, start + n);
    if (view != NULL && codec == ZSTD_CODEC && zstd_fn != NULL) {
        Py_buffer payload;
        Py_ssize_t bound = 0;
        if (PyObject_GetBuffer(view, &payload, PyBUF_SIMPLE) == 0) {
            bound = zstd_one_block_bound((const uint8_t *)payload.buf, payload.len);
            PyBuffer_Release(&payload);
        }
        else
            PyErr_Clear();
        if (bound > 0) {
            *out = zstd_one_call(zstd_fn, view, bound);
            if (*out != NULL) {
                Py_DECREF(view);
                return 1;
            }
            if (PyErr_Occurred()) {
                Py_DECREF(view);
                return -1;
            }
        }
    }
    code = PyLong_FromLong(codec);
    if (view == NULL || code == NULL) {
        Py_XDECREF(view);
        Py_XDECREF(code);
        return -1;
    }
    args[0] = code;
    args[1] = view;
    value = PyObject_Vectorcall(fn, args, 2, NULL);
    Py_DECREF(code);
    Py_DECREF(view);
    if (value == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception) || PyErr_ExceptionMatches(PyExc_MemoryError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    if (!PyBytes_Check(value)) {
        Py_DECREF(value);
        return 0;
    }
    *out = value;
    return 1;
}

PyDoc_STRVAR(scan_window_key_digests_doc,
"scan_window_key_digests(buf, position, limit, min_offset, max_puts, base_puts, decompress, zstd,\n"
"                        native, keep)\n"
"    -> (position, offsets bytes, digests bytes, batches bytes)\n\n"
"Pass 1 (cleaner/round/mapping.iter_dirty_keys) over the batches starting at `position`, before\n"
"`limit`: while each is a well-framed, non-transactional, non-control v2 batch whose records scan\n"
"(compressed ones only with `decompress`, records.compression.decompress: called as (codec, payload)\n"
"for each, the kernel stopping before a batch it raises on; a zstd batch's usual stream first\n"
"through `zstd`, records.compression.zstd_one_call(), when given; a gzip, snappy or lz4 batch's\n"
"usual stream in C where bit 1 << codec of `native` is set), the keyed records at or above\n"
"min_offset (scan_key_digests) and, per batch whose\n"
"last offset reaches min_offset, (put end counted from base_puts, last offset, records) as three\n"
"native int64. Stops before any other batch (the caller's per-batch walk takes it), at `limit`, or\n"
"after the batch that brings the puts to max_puts; returns where it stopped. Where `keep` is true,\n"
"every compressed batch's records are kept for scan_window_records (forget_inflated); a count that\n"
"no pass 2 follows (the keyless sample) gives 0.");

static PyObject *
scan_window_key_digests(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    int64_t position, limit, min_offset, max_puts, base_puts;
    Grow offsets = {0}, digests = {0}, batches = {0};
    Py_ssize_t puts = 0, err;
    PyObject *result = NULL, *decompress_fn, *zstd_fn, *source_view = NULL;
    Gil gil = {NULL};
    int out_of_memory = 0;
    int64_t native, keep;
    if (check_nargs("scan_window_key_digests", nargs, 10) < 0)
        return NULL;
    decompress_fn = args[6] == Py_None ? NULL : args[6];
    zstd_fn = args[7] == Py_None ? NULL : args[7];
    if (as_int64(args[1], &position) < 0 || as_int64(args[2], &limit) < 0
        || as_int64(args[3], &min_offset) < 0 || as_int64(args[4], &max_puts) < 0
        || as_int64(args[5], &base_puts) < 0 || as_int64(args[8], &native) < 0
        || as_int64(args[9], &keep) < 0
        || (decompress_fn != NULL && !PyCallable_Check(decompress_fn))
        || (zstd_fn != NULL && zstd_fn != Py_True && !PyCallable_Check(zstd_fn))
        || get_bytes(args[0], &view) < 0)
        return scan_error(DECLINED);
    const uint8_t *d = (const uint8_t *)view.buf;
    if (limit > view.len)
        limit = view.len;
    while (position >= 0 && position < limit && puts < max_puts) {
        const uint8_t *h = d + position;
        Py_ssize_t remaining = view.len - (Py_ssize_t)position, kept;
        gil_release(&gil);  /* held again only for a Python codec's batch */
        if (remaining < RECORD_BATCH_OVERHEAD)
            break;
        int16_t attributes = (int16_t)be(h + 21, 2);
        int32_t batch_length = (int32_t)be(h + 8, 4), records_count = (int32_t)be(h + 57, 4);
        int64_t base_offset = (int64_t)be(h, 8), last_offset;
        int codec = attributes & CODEC_MASK;
        /* what decode_batch takes, neither transactional nor control; compressed with decompress */
        if (h[16] != 2 || attributes < 0 || attributes > 0x7F || (attributes & 0x30) != 0
            || (codec != 0 && (decompress_fn == NULL || codec > MAX_CODEC))
            || batch_length < MIN_BATCH_LENGTH || records_count < 0
            || (Py_ssize_t)batch_length + LOG_OVERHEAD > remaining
            || __builtin_add_overflow(base_offset, (int64_t)(int32_t)be(h + 23, 4), &last_offset))
            break;
        if (last_offset >= min_offset) {
            Py_ssize_t n = (Py_ssize_t)batch_length + LOG_OVERHEAD - RECORD_BATCH_OVERHEAD;
            const uint8_t *records = h + RECORD_BATCH_OVERHEAD;
            PyObject *inflated = NULL;
            if (codec == ZSTD_CODEC && zstd_fn == Py_True) {  /* keys only: the scratch buffer will do */
                Py_ssize_t bound = zstd_frame_bound(records, n), got = -1;
                if (bound > 0 && (got = zstd_native_into_scratch(records, n, bound)) == -2) {
                    out_of_memory = 1;
                    break;
                }
                if (got >= 0) {
                    records = (const uint8_t *)zstd_scratch.data;
                    n = got;
                }
            }
            else if (codec != 0 && (native & (1 << codec))) {  /* gzip, snappy, lz4 in C, no GIL */
                Py_ssize_t got = codec_native_into(codec, records, n, &zstd_scratch);
                if (got == -2) {
                    out_of_memory = 1;
                    break;
                }
                if (got >= 0) {
                    records = (const uint8_t *)zstd_scratch.data;
                    n = got;
                }
            }
            if (codec != 0 && records == h + RECORD_BATCH_OVERHEAD) {
                gil_hold(&gil);  /* through records.compression: Python (its codec releases the GIL itself) */
                int got = decompressed(decompress_fn, zstd_fn, codec, args[0], &source_view,
                                       (Py_ssize_t)position + RECORD_BATCH_OVERHEAD, n, &inflated);
                if (got < 0)
                    goto done;
                if (got == 0)
                    break;  /* the per-batch walk raises the codec's error */
                records = (const uint8_t *)PyBytes_AS_STRING(inflated);
                n = PyBytes_GET_SIZE(inflated);
            }
            if (codec != 0 && keep)  /* for pass 2, which reads the same batch again */
                inflated_keep(codec, h + RECORD_BATCH_OVERHEAD,
                              (Py_ssize_t)batch_length + LOG_OVERHEAD - RECORD_BATCH_OVERHEAD, records, n);
            if (check_count(records_count, n) < 0)
                kept = -1;  /* the per-batch walk reports it */
            else if (grow_raw(&offsets, (Py_ssize_t)records_count * 8) < 0
                     || grow_raw(&digests, (Py_ssize_t)records_count * 16) < 0
                     || grow_raw(&batches, 24) < 0)
                kept = -2;
            else
                kept = walk_key_digests(records, n, base_offset, records_count,
                                        min_offset, (int64_t *)(offsets.data + offsets.size),
                                        (uint8_t *)(digests.data + digests.size), &err);
            Py_XDECREF(inflated);  /* not NULL only while the GIL is held */
            if (kept == -2) {
                out_of_memory = 1;
                break;
            }
            if (kept < 0)
                break;  /* corrupt records: nothing of this batch kept; the per-batch walk reports it */
            offsets.size += kept * 8;
            digests.size += kept * 16;
            puts += kept;
            int64_t info[3] = {base_puts + (int64_t)puts, last_offset, records_count};
            memcpy(batches.data + batches.size, info, sizeof info);
            batches.size += sizeof info;
        }
        position += (int64_t)batch_length + LOG_OVERHEAD;
    }
    gil_hold(&gil);
    if (out_of_memory) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_BuildValue("(Ly#y#y#)", (long long)position, offsets.data ? offsets.data : "",
                           offsets.size, digests.data ? digests.data : "", digests.size,
                           batches.data ? batches.data : "", batches.size);
done:
    gil_hold(&gil);
    zstd_scratch_trim();
    PyMem_RawFree(offsets.data);
    PyMem_RawFree(digests.data);
    PyMem_RawFree(batches.data);
    Py_XDECREF(source_view);
    PyBuffer_Release(&view);
    return result;
}

/* ---- pass 2 over a run of plain batches: scan_window_records, then emit_window ---------------- */

/* Per batch of a scanned run, native int64 (the `batches` bytes of scan_window_records). */
enum { W_POSITION, W_SIZE, W_BASE_OFFSET, W_LAST_OFFSET, W_COUNT, W_ATTRIBUTES, W_BASE_TIMESTAMP,
       W_MAX_TIMESTAMP, N_W_FIELDS };
/* Per record of a run, native int64 columns, positions absolute in the buffer. */
enum { WR_OFFSETS, WR_TIMESTAMPS, WR_KEY_STARTS, WR_KEY_ENDS, WR_BODY_STARTS, WR_RECORD_ENDS,
       N_WR_COLUMNS };

#define TIMESTAMP_TYPE_BIT 0x08
#define DELETE_HORIZON_BIT 0x40

/* Whether `offset` is in the ascending int64 array v[0..n). */
static int
in_sorted(const int64_t *v, Py_ssize_t n, int64_t offset)
{
    Py_ssize_t low = 0, high = n;
    while (low < high) {
        Py_ssize_t mid = low + (high - low) / 2;
        if (v[mid] < offset)
            low = mid + 1;
        else
            high = mid;
    }
    return low < n && v[low] == offset;
}

/* A window's decompressed records, back to back, in one bytes object (scan_window_records' `inflated`). */
typedef struct {
    PyObject *bytes;  /* NULL until the window's first compressed batch */
    Py_ssize_t size, capacity;
} Arena;

/* Room for `more` bytes past a->size, the GIL taken only to make or enlarge the object (a window's
 * first compressed batch, then rarely: room for max_bytes, capped, is made at once) and left as it was
 * found: 0, or -1 with an error set and the GIL held. */
static int
arena_room(Arena *a, Py_ssize_t more, int64_t max_bytes, Gil *gil)
{
    Py_ssize_t want = a->size + more, capacity;
    int released = gil->saved != NULL;
    if (want <= a->capacity)
        return 0;
    capacity = a->capacity > 0 ? 2 * a->capacity : (Py_ssize_t)(max_bytes < (16 << 20) ? max_bytes : (16 << 20));
    if (capacity < want)
        capacity = want;
    gil_hold(gil);
    if (a->bytes == NULL)
        a->bytes = PyBytes_FromStringAndSize(NULL, capacity);
    else if (_PyBytes_Resize(&a->bytes, capacity) < 0)
        a->bytes = NULL;  /* _PyBytes_Resize freed it */
    if (a->bytes == NULL)
        return -1;
    a->capacity = capacity;
    if (released)
        gil_release(gil);
    return 0;
}

PyDoc_STRVAR(scan_window_records_doc,
"scan_window_records(buf, position, limit, max_batches, max_records, max_bytes, protected,\n"
"                    upper_bound, decompress, zstd, native)\n"
"    -> (position, batches, offsets, timestamps, key_starts, key_ends, body_starts, record_ends,\n"
"        value_null, inflated)\n\n"
"Pass 2 (cleaner/round/filtering) over the batches starting at `position`, before `limit`: while\n"
"each is a well-framed, non-transactional, non-control v2 batch with records, a valid CRC-32C\n"
"(common.h), records that scan (scan_records; a compressed batch's only with\n"
"`decompress`, records.compression.decompress called as (codec, payload), a zstd batch's usual\n"
"stream first through `zstd` when given, a gzip, snappy or lz4 batch's in C where bit 1 << codec of\n"
"`native` is set, one pass 1 read taken as it kept it, and where it does not raise), a last offset not in the ascending int64 array `protected` and a next offset other than\n"
"upper_bound, its header fields (position, size, base offset, last offset, count, attributes, base\n"
"and max timestamp: native int64) and its records' columns (native int64; value_null one byte a\n"
"record). Record positions are absolute in buf, or, for a compressed batch's, len(buf) plus their\n"
"position in `inflated`: a list of one bytes, every compressed batch's records decompressed back to\n"
"back, as if after buf (empty without one). Stops before any other\n"
"batch (the caller's per-batch walk takes it), at `limit`, or after max_batches batches or the\n"
"batch that brings the records to max_records or the bytes read and inflated to max_bytes.");

static PyObject *
scan_window_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view, prot;
    int64_t position, limit, max_batches, max_records, max_bytes, upper_bound, start;
    Grow batches = {0}, columns[N_WR_COLUMNS] = {{0}}, value_null = {0};
    /* every compressed batch's records, decompressed, back to back: `inflated`'s one item, made with room
     * to spare (pages never written are never mapped) and cut to size at the end */
    Arena arena = {NULL, 0, 0};
    Py_ssize_t records = 0, taken = 0, err;
    PyObject *result = NULL, *decompress_fn, *zstd_fn, *inflated = NULL, *source_view = NULL;
    Gil gil = {NULL};
    int out_of_memory = 0;
    int64_t native;
    if (check_nargs("scan_window_records", nargs, 11) < 0)
        return NULL;
    decompress_fn = args[8] == Py_None ? NULL : args[8];
    zstd_fn = args[9] == Py_None ? NULL : args[9];
    if (as_int64(args[1], &position) < 0 || as_int64(args[2], &limit) < 0
        || as_int64(args[3], &max_batches) < 0 || as_int64(args[4], &max_records) < 0
        || as_int64(args[5], &max_bytes) < 0 || as_int64(args[7], &upper_bound) < 0
        || as_int64(args[10], &native) < 0 || (decompress_fn != NULL && !PyCallable_Check(decompress_fn))
        || (zstd_fn != NULL && zstd_fn != Py_True && !PyCallable_Check(zstd_fn)) || get_bytes(args[0], &view) < 0)
        return scan_error(DECLINED);
    if (get_8byte_ints(args[6], &prot, 'q', 'l') < 0) {
        PyBuffer_Release(&view);
        return scan_error(DECLINED);
    }
    const uint8_t *d = (const uint8_t *)view.buf;
    if (limit > view.len)
        limit = view.len;
    start = position;
    while (position >= 0 && position < limit && taken < max_batches && records < max_records
           && position - start + arena.size < max_bytes) {
        const uint8_t *h = d + position, *body;
        Py_ssize_t remaining = view.len - (Py_ssize_t)position, n, size;
        int16_t attributes;
        int32_t batch_length, count;
        int64_t base_offset, last_offset, next_offset, at;
        int codec;
        Columns c;
        gil_release(&gil);  /* held again only for a Python codec's batch */
        if (remaining < RECORD_BATCH_OVERHEAD)
            break;
        attributes = (int16_t)be(h + 21, 2);
        batch_length = (int32_t)be(h + 8, 4);
        count = (int32_t)be(h + 57, 4);
        base_offset = (int64_t)be(h, 8);
        codec = attributes & CODEC_MASK;
        /* what decode_batch takes; neither transactional nor control, with records; compressed
         * only with decompress */
        if (h[16] != 2 || attributes < 0 || attributes > 0x7F || (attributes & 0x30) != 0
            || (codec != 0 && (decompress_fn == NULL || codec > MAX_CODEC))
            || batch_length < MIN_BATCH_LENGTH || count <= 0
            || (Py_ssize_t)batch_length + LOG_OVERHEAD > remaining
            || __builtin_add_overflow(base_offset, (int64_t)(int32_t)be(h + 23, 4), &last_offset)
            || __builtin_add_overflow(last_offset, (int64_t)1, &next_offset)
            || next_offset == upper_bound
            || in_sorted((const int64_t *)prot.buf, prot.len / 8, last_offset))
            break;
        size = (Py_ssize_t)batch_length + LOG_OVERHEAD;
        if (crc32c_of(h + 21, size - 21) != (uint32_t)be(h + 17, 4))
            break;  /* the per-batch walk reports it */
        n = size - RECORD_BATCH_OVERHEAD;
        body = h + RECORD_BATCH_OVERHEAD;
        at = position + RECORD_BATCH_OVERHEAD;
        if (codec != 0) {  /* the records: the arena's next piece (kept once scanned) */
            Py_ssize_t got = -1;
            Inflated *kept;
            Py_ssize_t m;  /* pass 1's, or a gzip, snappy or lz4 batch's decoded here: no GIL */
            const uint8_t *r = codec_records(codec, body, n, native, &zstd_scratch, &kept, &m);
            if (m == -2) {
                out_of_memory = 1;
                break;
            }
            if (r != NULL) {
                int room = arena_room(&arena, m, max_bytes, &gil);
                if (room == 0)
                    memcpy(PyBytes_AS_STRING(arena.bytes) + arena.size, r, (size_t)m);
                inflated_free(kept);
                if (room < 0)
                    goto done;
                got = m;
            }
            else if (codec == ZSTD_CODEC && zstd_fn == Py_True) {  /* the vendored library, no GIL */
                Py_ssize_t bound = zstd_frame_bound(body, n);
                if (bound > 0) {
                    if (arena_room(&arena, bound, max_bytes, &gil) < 0)
                        goto done;
                    got = zstd_native_into(body, n, bound, PyBytes_AS_STRING(arena.bytes) + arena.size);
                }
            }
            if (got < 0) {  /* through records.compression: Python (its codec releases the GIL itself) */
                PyObject *piece = NULL;
                int called;
                gil_hold(&gil);
                called = decompressed(decompress_fn, zstd_fn, codec, args[0], &source_view,
                                      (Py_ssize_t)position + RECORD_BATCH_OVERHEAD, n, &piece);
                if (called < 0)
                    goto done;
                if (called == 0)
                    break;  /* the per-batch walk raises the codec's error */
                got = PyBytes_GET_SIZE(piece);
                if (arena_room(&arena, got, max_bytes, &gil) < 0) {
                    Py_DECREF(piece);
                    goto done;
                }
                memcpy(PyBytes_AS_STRING(arena.bytes) + arena.size, PyBytes_AS_STRING(piece), (size_t)got);
                Py_DECREF(piece);
            }
            n = got;
            body = (const uint8_t *)PyBytes_AS_STRING(arena.bytes) + arena.size;
            at = (int64_t)view.len + arena.size;
        }
        if (check_count(count, n) < 0)
            break;
        for (int k = 0; k < N_WR_COLUMNS; k++)
            if (grow_raw(&columns[k], (Py_ssize_t)count * 8) < 0)
                out_of_memory = 1;
        if (out_of_memory || grow_raw(&value_null, count) < 0 || grow_raw(&batches, N_W_FIELDS * 8) < 0) {
            out_of_memory = 1;
            break;
        }
        /* scan_records' walk into the run's columns (record starts are not kept: they share the
         * record ends' column, each overwritten by its record's end), positions then made absolute */
        c.column[OFFSETS] = (int64_t *)(columns[WR_OFFSETS].data + columns[WR_OFFSETS].size);
        c.column[TIMESTAMPS] = (int64_t *)(columns[WR_TIMESTAMPS].data + columns[WR_TIMESTAMPS].size);
        c.column[KEY_STARTS] = (int64_t *)(columns[WR_KEY_STARTS].data + columns[WR_KEY_STARTS].size);
        c.column[KEY_ENDS] = (int64_t *)(columns[WR_KEY_ENDS].data + columns[WR_KEY_ENDS].size);
        c.column[BODY_STARTS] = (int64_t *)(columns[WR_BODY_STARTS].data + columns[WR_BODY_STARTS].size);
        c.column[RECORD_ENDS] = (int64_t *)(columns[WR_RECORD_ENDS].data + columns[WR_RECORD_ENDS].size);
        c.column[RECORD_STARTS] = c.column[RECORD_ENDS];  /* written before record_ends, per record */
        c.value_null = value_null.data + value_null.size;
        c.log_append = (attributes & TIMESTAMP_TYPE_BIT) != 0;
        c.timestamp = c.log_append ? (int64_t)be(h + 35, 8) : (int64_t)be(h + 27, 8);
        if (walk_records(body, n, base_offset, count, &c, &err) < 0)
            break;  /* nothing of this batch kept; the per-batch walk reports it */
        if (codec != 0)
            arena.size += n;
        for (Py_ssize_t i = 0; i < count; i++) {
            if (c.column[KEY_STARTS][i] >= 0) {
                c.column[KEY_STARTS][i] += at;
                c.column[KEY_ENDS][i] += at;
            }
            c.column[BODY_STARTS][i] += at;
            c.column[RECORD_ENDS][i] += at;
        }
        for (int k = 0; k < N_WR_COLUMNS; k++)
            columns[k].size += (Py_ssize_t)count * 8;
        value_null.size += count;
        {
            int64_t info[N_W_FIELDS] = {position, size, base_offset, last_offset, count, attributes,
                                        (int64_t)be(h + 27, 8), (int64_t)be(h + 35, 8)};
            memcpy(batches.data + batches.size, info, sizeof info);
            batches.size += sizeof info;
        }
        records += count;
        taken++;
        position += size;
    }
    gil_hold(&gil);
    if (out_of_memory) {
        PyErr_NoMemory();
        goto done;
    }
    if (arena.bytes != NULL && arena.size == 0)
        Py_CLEAR(arena.bytes);
    if (arena.bytes != NULL && _PyBytes_Resize(&arena.bytes, arena.size) < 0)
        goto done;
    if ((inflated = PyList_New(0)) == NULL || (arena.bytes != NULL && PyList_Append(inflated, arena.bytes) < 0))
        goto done;
    result = Py_BuildValue("(Ly#y#y#y#y#y#y#y#O)", (long long)position,
                           batches.data ? batches.data : "", batches.size,
#define COL(k) columns[k].data ? columns[k].data : "", columns[k].size
                           COL(WR_OFFSETS), COL(WR_TIMESTAMPS), COL(WR_KEY_STARTS),
                           COL(WR_KEY_ENDS), COL(WR_BODY_STARTS), COL(WR_RECORD_ENDS),
#undef COL
                           value_null.data ? value_null.data : "", value_null.size, inflated);
done:
    gil_hold(&gil);
    zstd_scratch_trim();
    PyMem_RawFree(batches.data);
    PyMem_RawFree(value_null.data);
    Py_XDECREF(arena.bytes);
    Py_XDECREF(inflated);
    Py_XDECREF(source_view);
    for (int k = 0; k < N_WR_COLUMNS; k++)
        PyMem_RawFree(columns[k].data);
    PyBuffer_Release(&prot);
    PyBuffer_Release(&view);
    return result;
}

/* Outcomes of emit_window, one per input batch (records.filter.Outcome). */
enum { E_DROPPED, E_COPIED, E_REBUILT };
enum { E_OUTCOME, E_SIZE, E_LAST_OFFSET, E_MAX_TIMESTAMP, E_KEPT, N_E_FIELDS };

/* A scanned window's record columns, and where their positions point (scan_window_records):
 * buf, or for a compressed batch's records `inflated`'s one item, `piece`, which starts at
 * position piece_start (len(buf)). */
typedef struct {
    const uint8_t *buf, *piece, *kept, *nul;
    Py_ssize_t buf_len, piece_len;
    int64_t piece_start;
    const int64_t *off, *ts, *body, *end;
} Window;

/* The bytes at position `pos` of the batch being written: buf's, or its piece's. */
static inline const uint8_t *
window_at(const Window *x, int64_t pos)
{
    return pos >= x->buf_len ? x->piece + (pos - x->piece_start) : x->buf + pos;
}

/* Whether record i's body lies whole in buf (uncompressed batch) or in the piece (compressed). */
static inline int
body_inside(const Window *x, Py_ssize_t i, int compressed)
{
    int64_t body = x->body[i], end = x->end[i];
    if (body > end)
        return 0;
    if (compressed)
        return body >= x->piece_start && end - x->piece_start <= x->piece_len;
    return body >= 0 && end <= x->buf_len;
}

/* The kept records of rows [r0, r0 + count) written from p as filterTo rebuilds them (deltas from
 * base_offset and base_ts, checked by the caller); returns the end. */
static uint8_t *
write_kept(const Window *x, uint8_t *p, Py_ssize_t r0, int64_t count, int64_t base_offset,
           int64_t base_ts)
{
    for (Py_ssize_t i = r0; i < r0 + count; i++) {
        uint64_t ts_delta, off_delta;
        Py_ssize_t length;
        if (!x->kept[i])
            continue;
        ts_delta = zigzag64(x->ts[i] - base_ts);
        off_delta = zigzag64(x->off[i] - base_offset);
        length = 1 + unsigned_size(ts_delta) + unsigned_size(off_delta)
            + (Py_ssize_t)(x->end[i] - x->body[i]);
        p = put_unsigned(p, zigzag64(length));
        *p++ = 0;  /* attributes */
        p = put_unsigned(p, ts_delta);
        p = put_unsigned(p, off_delta);
        memcpy(p, window_at(x, x->body[i]), (size_t)(x->end[i] - x->body[i]));
        p += x->end[i] - x->body[i];
    }
    return p;
}

/* A compressed batch's rebuilt records, `raw` bytes long, compressed and appended to `packed`: for zstd
 * with `native` set by zstd_native_compress_into, for gzip with bit 1 << 1 of `codecs` set by
 * gzip_native_compress_into, both without the GIL (the records written into `scratch`), for snappy and lz4
 * with their block function in `blocks` by framed_compress_into (the GIL held),
 * else through compress(codec, records) (the reference's records.compression.compress) with the GIL held
 * again. The compressed length; -1 declined (compress raised an ordinary error or the library refused:
 * the reference then runs; nothing set), -2 out of memory (nothing set), -3 a Python error set. */
static Py_ssize_t
compressed_records(Gil *gil, PyObject *compress_fn, int native, int64_t codecs, PyObject *const *blocks,
                   int codec, const Window *x, Py_ssize_t r0,
                   int64_t count, int64_t base_offset, int64_t base_ts, Py_ssize_t raw, Grow *scratch,
                   Grow *packed)
{
    PyObject *records, *code, *value, *call[2];
    Py_ssize_t got;
    if (native && codec == ZSTD_CODEC) {
        scratch->size = 0;
        if (grow_raw(scratch, raw) < 0)
            return -2;
        write_kept(x, (uint8_t *)scratch->data, r0, count, base_offset, base_ts);
        return zstd_native_compress_into(packed, (const uint8_t *)scratch->data, raw);
    }
    if (codec == CODEC_GZIP && (codecs & (1 << CODEC_GZIP))) {
        scratch->size = 0;
        if (grow_raw(scratch, raw) < 0)
            return -2;
        write_kept(x, (uint8_t *)scratch->data, r0, count, base_offset, base_ts);
        return gzip_native_compress_into(packed, (const uint8_t *)scratch->data, raw);
    }
    gil_hold(gil);  /* through records.compression: Python (its codec releases the GIL itself) */
    if ((codec == CODEC_SNAPPY || codec == CODEC_LZ4) && blocks[codec - CODEC_SNAPPY] != NULL) {
        scratch->size = 0;  /* the library's blocks, framed here */
        if (grow_raw(scratch, raw) < 0)
            return -2;
        write_kept(x, (uint8_t *)scratch->data, r0, count, base_offset, base_ts);
        return framed_compress_into(packed, codec, blocks[codec - CODEC_SNAPPY], (uint8_t *)scratch->data, raw);
    }
    if ((records = PyBytes_FromStringAndSize(NULL, raw)) == NULL)
        return -3;
    write_kept(x, (uint8_t *)PyBytes_AS_STRING(records), r0, count, base_offset, base_ts);
    if ((code = PyLong_FromLong(codec)) == NULL) {
        Py_DECREF(records);
        return -3;
    }
    call[0] = code;
    call[1] = records;
    value = PyObject_Vectorcall(compress_fn, call, 2, NULL);
    Py_DECREF(code);
    Py_DECREF(records);
    if (value == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception) || PyErr_ExceptionMatches(PyExc_MemoryError))
            return -3;
        PyErr_Clear();
        return -1;
    }
    if (!PyBytes_Check(value)) {
        Py_DECREF(value);
        return -1;
    }
    got = PyBytes_GET_SIZE(value);
    if (grow_raw(packed, got) < 0) {
        Py_DECREF(value);
        return -2;
    }
    memcpy(packed->data + packed->size, PyBytes_AS_STRING(value), (size_t)got);
    packed->size += got;
    Py_DECREF(value);
    return got;
}

PyDoc_STRVAR(emit_window_doc,
"emit_window(buf, batches, offsets, timestamps, body_starts, record_ends, value_null, kept,\n"
"            new_horizon, inflated, compress, zstd, native, blocks) -> (output bytes, per batch (outcome, size,\n"
"            last offset, max timestamp, records kept) as native int64)\n\n"
"records.filter.filter_v2_batch over a run of scan_window_records, all DELETE_EMPTY: per batch,\n"
"nothing kept: dropped (outcome 0); all kept and no horizon to set: its bytes (1); else rebuilt\n"
"(2) with the horizon policy.output_delete_horizon gives (new_horizon, negative for none, when a\n"
"kept record is a tombstone and the batch has none), a compressed batch's records compressed again\n"
"with its codec by compress (records.compression.compress, called as (codec, records)); zstd True:\n"
"a zstd batch's with the vendored library instead, as compress would; bit 1 << 1 of native: a gzip\n"
"batch's with zlib, as compress would; blocks, (snappy, lz4) of records.compression.block_compressors():\n"
"a snappy or lz4 batch's through its block function, framed here, as compress would. kept: one\n"
"byte a record; inflated: the run's (its compressed batches' records, one bytes). Raises ScanError(-1)\n"
"where the reference would fail or the arguments do not match.");

static PyObject *
emit_window(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    enum { N_VIEWS = 8 };
    Py_buffer views[N_VIEWS];
    int held = 0, native, out_of_memory = 0;
    int64_t new_horizon, codecs;
    Py_ssize_t n_batches = 0, n_records, total = 0;
    const int64_t *info;
    Window x;
    PyObject *out = NULL, *table = NULL, *result = NULL, *compress_fn, *inflated;
    PyObject *piece_ref = NULL;  /* the window's records, held: read without the GIL and across compress_fn */
    Py_ssize_t *packed_at = NULL;  /* per batch: where its compressed records start in `packed`, or -1 */
    Grow packed = {0}, scratch = {0};  /* the rebuilt compressed batches' records; one's uncompressed */
    Gil gil = {NULL};
    int64_t *row;
    uint8_t *w;
    PyObject *blocks[2] = {NULL, NULL};  /* snappy's and lz4's block functions */
    if (check_nargs("emit_window", nargs, 14) < 0)
        return NULL;
    if (args[13] != Py_None) {
        if (!PyTuple_CheckExact(args[13]) || PyTuple_GET_SIZE(args[13]) != 2)
            return scan_error(DECLINED);
        for (int k = 0; k < 2; k++) {
            PyObject *fn = PyTuple_GET_ITEM(args[13], k);
            if (fn != Py_None && !PyCallable_Check(fn))
                return scan_error(DECLINED);
            blocks[k] = fn == Py_None ? NULL : fn;
        }
    }
    inflated = args[9];
    compress_fn = args[10] == Py_None ? NULL : args[10];
    native = args[11] == Py_True;
    if (as_int64(args[8], &new_horizon) < 0 || as_int64(args[12], &codecs) < 0
        || (compress_fn != NULL && !PyCallable_Check(compress_fn)) || !PyList_CheckExact(inflated))
        return scan_error(DECLINED);
    for (held = 0; held < N_VIEWS; held++)  /* the int64 ones as scan_window_records made them: bytes */
        if (get_bytes(args[held], &views[held]) < 0)
            goto declined;
    x.buf = views[0].buf;
    x.buf_len = views[0].len;
    info = views[1].buf;
    x.off = views[2].buf;
    x.ts = views[3].buf;
    x.body = views[4].buf;
    x.end = views[5].buf;
    x.nul = views[6].buf;
    x.kept = views[7].buf;
    x.piece = NULL;
    x.piece_len = 0;
    x.piece_start = x.buf_len;
    n_batches = views[1].len / (8 * N_W_FIELDS);
    n_records = views[2].len / 8;
    if (views[1].len != n_batches * 8 * N_W_FIELDS || views[3].len != n_records * 8
        || views[4].len != n_records * 8 || views[5].len != n_records * 8
        || views[6].len != n_records || views[7].len != n_records)
        goto declined;
    if (PyList_GET_SIZE(inflated) > 1)
        goto declined;
    if (PyList_GET_SIZE(inflated) == 1) {  /* every compressed batch's records, back to back */
        PyObject *piece = PyList_GET_ITEM(inflated, 0);
        if (!PyBytes_Check(piece))
            goto declined;
        piece_ref = Py_NewRef(piece);  /* the list's item is borrowed: another owner could drop it meanwhile */
        x.piece = (const uint8_t *)PyBytes_AS_STRING(piece);
        x.piece_len = PyBytes_GET_SIZE(piece);
    }
    table = PyBytes_FromStringAndSize(NULL, n_batches * N_E_FIELDS * 8);
    packed_at = PyMem_Calloc(n_batches > 0 ? (size_t)n_batches : 1, sizeof(Py_ssize_t));
    if (table == NULL || packed_at == NULL) {
        if (table != NULL)
            PyErr_NoMemory();
        goto done;
    }
    row = (int64_t *)PyBytes_AS_STRING(table);
    /* first pass: every batch's fate and size, everything checked, compressed rebuilds made */
    for (Py_ssize_t b = 0, r0 = 0; b < n_batches; b++) {
        const int64_t *bi = info + b * N_W_FIELDS;
        int64_t count = bi[W_COUNT], k = 0, max_ts = -1, horizon, base_ts = 0;
        int has_h = (bi[W_ATTRIBUTES] & DELETE_HORIZON_BIT) != 0, any_tomb = 0, first = 1;
        int codec = (int)(bi[W_ATTRIBUTES] & CODEC_MASK);
        int64_t *e = row + b * N_E_FIELDS;
        Py_ssize_t bytes = 0;
        gil_release(&gil);  /* held again only for a Python codec's batch */
        packed_at[b] = -1;
        if (count <= 0 || r0 + count > n_records || bi[W_POSITION] < 0
            || bi[W_SIZE] < RECORD_BATCH_OVERHEAD || bi[W_POSITION] + bi[W_SIZE] > x.buf_len
            || codec > MAX_CODEC || (codec != 0 && (compress_fn == NULL || x.piece == NULL)))
            goto declined;
        for (Py_ssize_t i = r0; i < r0 + count; i++)
            if (x.kept[i]) {
                k++;
                any_tomb |= x.nul[i] != 0;
            }
        horizon = any_tomb && !has_h ? new_horizon : (has_h ? bi[W_BASE_TIMESTAMP] : -1);
        e[E_LAST_OFFSET] = bi[W_LAST_OFFSET];
        e[E_KEPT] = k;
        if (k == 0) {
            e[E_OUTCOME] = E_DROPPED;
            e[E_SIZE] = 0;
            e[E_MAX_TIMESTAMP] = -1;
        }
        else if (k == count && (has_h || horizon < 0)) {  /* filterTo: no horizon to set */
            e[E_OUTCOME] = E_COPIED;
            e[E_SIZE] = bi[W_SIZE];
            e[E_MAX_TIMESTAMP] = bi[W_MAX_TIMESTAMP];
        }
        else {
            bytes = RECORD_BATCH_OVERHEAD;
            for (Py_ssize_t i = r0; i < r0 + count; i++) {
                int64_t ts_delta, off_delta;
                Py_ssize_t length;
                if (!x.kept[i])
                    continue;
                if (first) {
                    base_ts = horizon >= 0 ? horizon : x.ts[i];
                    first = 0;
                }
                if (!body_inside(&x, i, codec != 0)
                    || __builtin_sub_overflow(x.ts[i], base_ts, &ts_delta)
                    || __builtin_sub_overflow(x.off[i], bi[W_BASE_OFFSET], &off_delta)
                    || off_delta < INT32_MIN || off_delta > INT32_MAX)
                    goto declined;
                length = 1 + unsigned_size(zigzag64(ts_delta)) + unsigned_size(zigzag64(off_delta))
                    + (Py_ssize_t)(x.end[i] - x.body[i]);
                bytes += unsigned_size(zigzag64(length)) + length;
                if (x.ts[i] > max_ts)
                    max_ts = x.ts[i];
            }
            if (bytes - LOG_OVERHEAD > INT32_MAX)  /* deltas can grow a record: the reference refuses */
                goto declined;
            if (codec != 0) {
                Py_ssize_t at = packed.size;
                Py_ssize_t got = compressed_records(&gil, compress_fn, native, codecs, blocks, codec, &x, r0, count,
                                                    bi[W_BASE_OFFSET], base_ts,
                                                    bytes - RECORD_BATCH_OVERHEAD, &scratch, &packed);
                if (got == -1)
                    goto declined;
                if (got == -2) {
                    out_of_memory = 1;
                    break;
                }
                if (got < 0)
                    goto done;
                packed_at[b] = at;
                bytes = RECORD_BATCH_OVERHEAD + got;
                if (bytes - LOG_OVERHEAD > INT32_MAX)
                    goto declined;
            }
            e[E_OUTCOME] = E_REBUILT;
            e[E_SIZE] = bytes;
            e[E_MAX_TIMESTAMP] = bi[W_ATTRIBUTES] & TIMESTAMP_TYPE_BIT ? bi[W_MAX_TIMESTAMP] : max_ts;
        }
        total += (Py_ssize_t)e[E_SIZE];
        r0 += count;
    }
    gil_hold(&gil);
    if (out_of_memory) {
        PyErr_NoMemory();
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        goto done;
    w = (uint8_t *)PyBytes_AS_STRING(out);
    gil_release(&gil);
    /* second pass: write (the pieces' records were compressed in the first) */
    for (Py_ssize_t b = 0, r0 = 0; b < n_batches; b++) {
        const int64_t *bi = info + b * N_W_FIELDS;
        const int64_t *e = row + b * N_E_FIELDS;
        const uint8_t *h = x.buf + bi[W_POSITION];
        int64_t count = bi[W_COUNT];
        if (e[E_OUTCOME] == E_COPIED) {
            memcpy(w, h, (size_t)bi[W_SIZE]);
        }
        else if (e[E_OUTCOME] == E_REBUILT) {
            int has_h = (bi[W_ATTRIBUTES] & DELETE_HORIZON_BIT) != 0, any_tomb = 0;
            int64_t horizon, base_ts, codec = bi[W_ATTRIBUTES] & CODEC_MASK;
            Py_ssize_t first_kept = -1;  /* there is one: the batch is not dropped */
            for (Py_ssize_t i = r0; i < r0 + count; i++) {
                any_tomb |= x.kept[i] && x.nul[i];
                if (first_kept < 0 && x.kept[i])
                    first_kept = i;
            }
            horizon = any_tomb && !has_h ? new_horizon : (has_h ? bi[W_BASE_TIMESTAMP] : -1);
            base_ts = horizon >= 0 ? horizon : x.ts[first_kept];
            if (packed_at[b] >= 0)
                memcpy(w + RECORD_BATCH_OVERHEAD, packed.data + packed_at[b],
                       (size_t)(e[E_SIZE] - RECORD_BATCH_OVERHEAD));
            else
                write_kept(&x, w + RECORD_BATCH_OVERHEAD, r0, count, bi[W_BASE_OFFSET], base_ts);
            /* the header: encode_under_header_of's fields, the batch's own codec */
            memcpy(w, h, 8);                                     /* base offset */
            put_be(w + 8, (uint64_t)(e[E_SIZE] - LOG_OVERHEAD), 4);  /* batch length */
            memcpy(w + 12, h + 12, 4);                           /* partition leader epoch */
            w[16] = 2;                                           /* magic */
            put_be(w + 21, (uint64_t)((bi[W_ATTRIBUTES] & TIMESTAMP_TYPE_BIT) | codec
                                      | (horizon >= 0 ? DELETE_HORIZON_BIT : 0)), 2);
            memcpy(w + 23, h + 23, 4);                           /* last offset delta */
            put_be(w + 27, (uint64_t)base_ts, 8);
            put_be(w + 35, (uint64_t)e[E_MAX_TIMESTAMP], 8);
            memcpy(w + 43, h + 43, 14);                          /* producer id, epoch, base sequence */
            put_be(w + 57, (uint64_t)e[E_KEPT], 4);
            put_be(w + 17, crc32c_of(w + 21, (Py_ssize_t)e[E_SIZE] - 21), 4);
        }
        w += e[E_SIZE];
        r0 += count;
    }
    gil_hold(&gil);
    result = PyTuple_Pack(2, out, table);
    goto done;
declined:
    gil_hold(&gil);
    PyErr_Clear();
    scan_error(DECLINED);
done:
    gil_hold(&gil);
    for (int v = 0; v < held; v++)
        PyBuffer_Release(&views[v]);
    PyMem_Free(packed_at);
    PyMem_RawFree(packed.data);
    PyMem_RawFree(scratch.data);
    Py_XDECREF(out);
    Py_XDECREF(table);
    Py_XDECREF(piece_ref);
    return result;
}


/* ---- module ----------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"zstd_version", zstd_version, METH_NOARGS, zstd_version_doc},
    {"zlib_version", zlib_runtime_version, METH_NOARGS, zlib_runtime_version_doc},
    {"forget_inflated", forget_inflated, METH_VARARGS, forget_inflated_doc},
    {"inflated_held", inflated_held, METH_NOARGS, inflated_held_doc},
    {"scan_window_key_digests", (PyCFunction)(void (*)(void))scan_window_key_digests, METH_FASTCALL, scan_window_key_digests_doc},
    {"scan_window_records", (PyCFunction)(void (*)(void))scan_window_records, METH_FASTCALL, scan_window_records_doc},
    {"emit_window", (PyCFunction)(void (*)(void))emit_window, METH_FASTCALL, emit_window_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kcompact.cleaner.round._windows",
    .m_doc = "The round's window kernels; see cleaner/round/accel.py.",
    .m_size = -1,  /* module state in statics: ScanError */
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__windows(void)
{
    /* the CRC-32C tables made now, under the GIL: two threads may run the kernels at once without it */
    if (!crc32c_ready)
        crc32c_init();
    if (inflated_init() < 0)
        return NULL;
    return kcompact_module(&module_def, "kcompact.cleaner.round._windows.ScanError");
}
