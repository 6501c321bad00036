/*
 * kcompact.records.scan._accel -- compiled kernels for the cleaner's hot path.
 *
 * Why: a clean reads every record twice (scan_keys to build the offset map, scan_records to
 * decide each record's fate) and re-encodes the prefix of every kept record (filter._rebuild).
 * In pure Python those three loops are ~4.5 s of the 2M-record bench clean; here they are a few
 * tens of nanoseconds per record. Each function below is a drop-in for a pure-Python function
 * that stays the reference (kcompact/records/scan/__init__.py, filter.py) and is tested against it.
 *
 * The input is the decompressed record bytes of one v2 batch, records back to back (Kafka's DefaultRecord layout):
 *
 *     length          varint   bytes after this field            -> record_starts[i]
 *     attributes      int8     (ignored)
 *     timestampDelta  varlong  timestamp - base_timestamp
 *     offsetDelta     varint   offset - base_offset
 *     keyLength       varint   < 0: null key                     -> body_starts[i]
 *     key             bytes                                      -> key_starts[i]:key_ends[i]
 *     valueLength     varint   < 0: null value (tombstone)       -> value_null[i]
 *     value           bytes
 *     headersCount    varint   \ jumped over through `length`
 *     headers         ...      /                                 -> record_ends[i]
 *
 * Contract with the Python wrappers (kcompact/records/scan/accel.py). A kernel either returns exactly
 * what the pure-Python reference returns, or raises ScanError and leaves nothing behind; the
 * wrapper then runs the reference, which raises its exact error (class, message, position). So
 * the kernels only have to be exact about *whether* the reference fails, never about its
 * messages. ScanError.args[0] is the position the reference reports for the first problem
 * (tests compare it), or -1 when the kernel declines its arguments as such: an integer that is
 * not an exact int in the int64 range, a buffer that is not flat bytes, an index the reference
 * would take from the end, ... (the reference then does whatever it does with them).
 *
 * Every read is bounds-checked against the buffer length before it happens, in the order the
 * reference reads, so that the first failure is the reference's first failure:
 *   - a varint's first or second byte past the data: the reference's IndexError, reported at the
 *     record's start; a longer varint that runs past the data or does not end within 5 (varlong
 *     10) bytes: decode_varint's error, at the varint's own position;
 *   - record length below the 6-byte minimum body or past the data; key (scan_records: value)
 *     past the record; base_offset + offsetDelta outside int64 (the reference's OverflowError);
 *     bytes left after `count` records. Timestamp sums wrap like Java longs.
 */
#include "common.h"
#include "walk.h"
#include "_legacy.h"

#define N_BATCH_FIELDS 15  /* RecordBatch: position, the 13 header fields, buffer */

PyObject *kcompact_scan_error;  /* kcompact.records.scan._accel.ScanError (common.h) */
static PyObject *array_type;    /* array.array */
static PyObject *typecode_q;    /* "q" */

/* ---- columns ---------------------------------------------------------------------------- */

/* array('q', raw): the column as the reference's type, from bytes filled in place. */
static PyObject *
int64_array(PyObject *raw)
{
    return PyObject_CallFunctionObjArgs(array_type, typecode_q, raw, NULL);
}

/* ---- scan_keys -------------------------------------------------------------------------- */

/* Fill offsets and keys; 0, or -1 with *err set (corrupt) or a Python error set (memory). */
static int
walk_keys(const uint8_t *d, Py_ssize_t n, int64_t base_offset, Py_ssize_t count,
          int64_t *offsets, PyObject *keys, Py_ssize_t *err)
{
    Py_ssize_t p = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        RecordHead head;
        int32_t size;
        Py_ssize_t q;
        PyObject *key;
        if (read_head(d, n, p, base_offset, &head, err) < 0)
            return -1;
        offsets[i] = head.offset;
        if (read_varint(d, n, head.body, p, &size, &q, err) < 0)
            return -1;
        if (size >= 0) {
            if (q + size > head.end) {
                *err = p;
                return -1;
            }
            key = PyBytes_FromStringAndSize((const char *)d + q, size);
            if (key == NULL)
                return -1;
        }
        else if (q > head.end) {
            *err = p;
            return -1;
        }
        else {
            key = Py_NewRef(Py_None);
        }
        PyList_SET_ITEM(keys, i, key);
        p = head.end;
    }
    if (p != n) {
        *err = p;
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(scan_keys_doc,
"scan_keys(data, base_offset, count) -> (array('q') offsets, list of keys)\n\n"
"scan.scan_keys; raises ScanError(position) where the reference would fail.");

static PyObject *
scan_keys(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    int64_t base_offset, count;
    Py_ssize_t err = DECLINED;
    PyObject *raw = NULL, *keys = NULL, *offsets = NULL, *result = NULL;
    if (check_nargs("scan_keys", nargs, 3) < 0)
        return NULL;
    if (as_int64(args[1], &base_offset) < 0 || as_int64(args[2], &count) < 0
        || get_bytes(args[0], &view) < 0)
        return scan_error(DECLINED);
    if (check_count(count, view.len) < 0) {
        PyBuffer_Release(&view);
        return scan_error(0);
    }
    raw = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * 8);
    keys = raw == NULL ? NULL : PyList_New((Py_ssize_t)count);
    if (keys == NULL)
        goto done;
    if (walk_keys((const uint8_t *)view.buf, view.len, base_offset, (Py_ssize_t)count,
                  (int64_t *)PyBytes_AS_STRING(raw), keys, &err) < 0) {
        if (!PyErr_Occurred())
            scan_error(err);
        goto done;
    }
    offsets = int64_array(raw);
    if (offsets != NULL)
        result = PyTuple_Pack(2, offsets, keys);
done:
    PyBuffer_Release(&view);
    Py_XDECREF(raw);
    Py_XDECREF(keys);
    Py_XDECREF(offsets);
    return result;
}

PyDoc_STRVAR(scan_key_digests_doc,
"scan_key_digests(data, base_offset, count, min_offset) -> (offsets bytes, digests bytes)\n\n"
"scan.scan_key_digests: native int64 offsets and 16-byte XXH3-128 digests of the keyed records\n"
"at or above min_offset; raises ScanError(position) where scan_keys' reference would fail.");

static PyObject *
scan_key_digests(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    int64_t base_offset, count, min_offset;
    Py_ssize_t err = DECLINED, kept;
    PyObject *offsets = NULL, *digests = NULL, *result = NULL;
    if (check_nargs("scan_key_digests", nargs, 4) < 0)
        return NULL;
    if (as_int64(args[1], &base_offset) < 0 || as_int64(args[2], &count) < 0
        || as_int64(args[3], &min_offset) < 0 || get_bytes(args[0], &view) < 0)
        return scan_error(DECLINED);
    if (check_count(count, view.len) < 0) {
        PyBuffer_Release(&view);
        return scan_error(0);
    }
    offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * 8);
    digests = offsets == NULL ? NULL : PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * 16);
    if (digests == NULL)
        goto done;
    kept = walk_key_digests((const uint8_t *)view.buf, view.len, base_offset, (Py_ssize_t)count,
                            min_offset, (int64_t *)PyBytes_AS_STRING(offsets),
                            (uint8_t *)PyBytes_AS_STRING(digests), &err);
    if (kept < 0) {
        scan_error(err);
        goto done;
    }
    /* shrink to what was kept: both objects are new and unshared, as _PyBytes_Resize needs */
    if (_PyBytes_Resize(&offsets, kept * 8) < 0 || _PyBytes_Resize(&digests, kept * 16) < 0)
        goto done;
    result = PyTuple_Pack(2, offsets, digests);
done:
    PyBuffer_Release(&view);
    Py_XDECREF(offsets);
    Py_XDECREF(digests);
    return result;
}

/* The result tuple in RecordColumns' field order (value_null between key_ends and
 * record_starts), then the data as bytes: the same object when it is bytes, as the reference. */
static PyObject *
columns_tuple(PyObject *const *raws, PyObject *value_null, PyObject *data, Py_buffer *view)
{
    PyObject *result = PyTuple_New(N_COLUMNS + 2);
    if (result == NULL)
        return NULL;
    for (int k = 0; k < N_COLUMNS; k++) {
        PyObject *column = int64_array(raws[k]);
        if (column == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyTuple_SET_ITEM(result, k < RECORD_STARTS ? k : k + 1, column);
    }
    PyTuple_SET_ITEM(result, RECORD_STARTS, Py_NewRef(value_null));
    data = PyBytes_CheckExact(data) ? Py_NewRef(data)
        : PyBytes_FromStringAndSize((const char *)view->buf, view->len);
    if (data == NULL) {
        Py_DECREF(result);
        return NULL;
    }
    PyTuple_SET_ITEM(result, N_COLUMNS + 1, data);
    return result;
}

/* base_timestamp and log_append_time as the reference uses them (base ignored for LAT). */
static int
timestamp_args(PyObject *base_timestamp, PyObject *log_append_time, Columns *c)
{
    c->log_append = log_append_time != Py_None;
    return as_int64(c->log_append ? log_append_time : base_timestamp, &c->timestamp);
}

PyDoc_STRVAR(scan_records_doc,
"scan_records(data, base_offset, base_timestamp, count, log_append_time)\n"
"-> (offsets, timestamps, key_starts, key_ends, value_null, record_starts, body_starts,\n"
"    record_ends, data)\n\n"
"scan.scan_records' columns; raises ScanError(position) where the reference would fail.");

static PyObject *
scan_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Columns c;
    int64_t base_offset, count;
    Py_ssize_t err = DECLINED;
    PyObject *raws[N_COLUMNS] = {NULL}, *value_null = NULL, *result = NULL;
    if (check_nargs("scan_records", nargs, 5) < 0)
        return NULL;
    if (as_int64(args[1], &base_offset) < 0 || timestamp_args(args[2], args[4], &c) < 0
        || as_int64(args[3], &count) < 0 || get_bytes(args[0], &view) < 0)
        return scan_error(DECLINED);
    if (check_count(count, view.len) < 0) {
        PyBuffer_Release(&view);
        return scan_error(0);
    }
    for (int k = 0; k < N_COLUMNS; k++) {
        raws[k] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * 8);
        if (raws[k] == NULL)
            goto done;
        c.column[k] = (int64_t *)PyBytes_AS_STRING(raws[k]);
    }
    value_null = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)count);
    if (value_null == NULL)
        goto done;
    c.value_null = PyByteArray_AS_STRING(value_null);
    if (walk_records((const uint8_t *)view.buf, view.len, base_offset, (Py_ssize_t)count,
                     &c, &err) < 0) {
        scan_error(err);
        goto done;
    }
    result = columns_tuple(raws, value_null, args[0], &view);
done:
    PyBuffer_Release(&view);
    for (int k = 0; k < N_COLUMNS; k++)
        Py_XDECREF(raws[k]);
    Py_XDECREF(value_null);
    return result;
}

/* ---- rebuild_records -------------------------------------------------------------------- */

/* What the rebuild reads: the scanned bytes and four columns of RecordColumns. */
enum { R_BODY_STARTS, R_RECORD_ENDS, R_OFFSETS, R_TIMESTAMPS, N_REBUILD_COLUMNS };

typedef struct {
    const uint8_t *data;
    Py_ssize_t size;
    const int64_t *column[N_REBUILD_COLUMNS];
    Py_ssize_t rows;         /* the shortest column's length: valid indices are below it */
    int64_t base_offset;
    int64_t base_timestamp;
} Rebuild;

/* One kept record's new prefix and body. */
typedef struct {
    uint64_t timestamp_delta;  /* zig-zagged */
    uint64_t offset_delta;     /* zig-zagged */
    Py_ssize_t body;
    Py_ssize_t body_size;
    Py_ssize_t length;         /* the record's length field */
} Kept;

/* The reference's per-record work for index i, or -1 where it would raise (or index from the
 * end): deltas must fit varlong / varint, the body slice must lie inside the data. */
static int
plan_record(const Rebuild *r, Py_ssize_t i, Kept *k)
{
    int64_t ts_delta, off_delta, body, end;
    if (i < 0 || i >= r->rows)
        return -1;
    body = r->column[R_BODY_STARTS][i];
    end = r->column[R_RECORD_ENDS][i];
    if (body < 0 || body > end || end > r->size)
        return -1;
    if (__builtin_sub_overflow(r->column[R_TIMESTAMPS][i], r->base_timestamp, &ts_delta)
        || __builtin_sub_overflow(r->column[R_OFFSETS][i], r->base_offset, &off_delta)
        || off_delta < INT32_MIN || off_delta > INT32_MAX)
        return -1;
    k->timestamp_delta = zigzag64(ts_delta);
    k->offset_delta = zigzag64(off_delta);  /* same bytes as the 32-bit zig-zag in int32 range */
    k->body = (Py_ssize_t)body;
    k->body_size = (Py_ssize_t)(end - body);
    k->length = 1 + unsigned_size(k->timestamp_delta) + unsigned_size(k->offset_delta)
        + k->body_size;
    return 0;
}

/* Two passes over keep: check and size everything, then write into an exact-size bytes. */
static PyObject *
rebuild(const Rebuild *r, PyObject *const *keep, Py_ssize_t kept, int64_t *max_timestamp)
{
    Py_ssize_t total = 0;
    PyObject *out;
    uint8_t *w;
    Kept k;
    *max_timestamp = -1;  /* NO_TIMESTAMP, the reference's floor */
    for (Py_ssize_t j = 0; j < kept; j++) {
        Py_ssize_t i = PyLong_CheckExact(keep[j]) ? PyLong_AsSsize_t(keep[j]) : -1;
        if (i == -1 && PyErr_Occurred())
            PyErr_Clear();
        if (plan_record(r, i, &k) < 0)
            return scan_error(DECLINED);
        total += unsigned_size(zigzag64(k.length)) + k.length;
        if (r->column[R_TIMESTAMPS][i] > *max_timestamp)
            *max_timestamp = r->column[R_TIMESTAMPS][i];
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    w = (uint8_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t j = 0; j < kept; j++) {
        plan_record(r, PyLong_AsSsize_t(keep[j]), &k);  /* checked in the first pass */
        w = put_unsigned(w, zigzag64(k.length));
        *w++ = 0;  /* attributes */
        w = put_unsigned(w, k.timestamp_delta);
        w = put_unsigned(w, k.offset_delta);
        memcpy(w, r->data + k.body, (size_t)k.body_size);
        w += k.body_size;
    }
    return out;
}

/* base_timestamp: the horizon when one is given, else the first kept record's timestamp. */
static int
rebuild_base_timestamp(Rebuild *r, PyObject *horizon, PyObject *first)
{
    Py_ssize_t i;
    if (horizon != Py_None)
        return as_int64(horizon, &r->base_timestamp);
    i = PyLong_CheckExact(first) ? PyLong_AsSsize_t(first) : -1;
    if (i == -1 && PyErr_Occurred())
        PyErr_Clear();
    if (i < 0 || i >= r->rows)
        return -1;
    r->base_timestamp = r->column[R_TIMESTAMPS][i];
    return 0;
}

PyDoc_STRVAR(rebuild_records_doc,
"rebuild_records(data, body_starts, record_ends, offsets, timestamps, keep, base_offset,\n"
"                horizon) -> (records bytes, base_timestamp, max kept timestamp or -1)\n\n"
"filter._rebuild's record section; raises ScanError(-1) where the reference would fail.");

static PyObject *
rebuild_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer views[N_REBUILD_COLUMNS + 1];
    int held = 0;
    Rebuild r;
    int64_t max_timestamp = -1;
    PyObject *keep = NULL, *raw = NULL, *result = NULL;
    if (check_nargs("rebuild_records", nargs, 8) < 0)
        return NULL;
    if (as_int64(args[6], &r.base_offset) < 0 || get_bytes(args[0], &views[0]) < 0)
        return scan_error(DECLINED);
    for (held = 1; held <= N_REBUILD_COLUMNS; held++)
        if (get_8byte_ints(args[held], &views[held], 'q', 'l') < 0)
            goto declined;
    r.data = (const uint8_t *)views[0].buf;
    r.size = views[0].len;
    r.rows = PY_SSIZE_T_MAX;
    for (int c = 0; c < N_REBUILD_COLUMNS; c++) {
        r.column[c] = (const int64_t *)views[c + 1].buf;
        if (views[c + 1].len / 8 < r.rows)
            r.rows = views[c + 1].len / 8;
    }
    keep = PyList_CheckExact(args[5]) || PyTuple_CheckExact(args[5])
        ? PySequence_Fast(args[5], "keep") : NULL;
    if (keep == NULL || PySequence_Fast_GET_SIZE(keep) == 0
        || rebuild_base_timestamp(&r, args[7], PySequence_Fast_GET_ITEM(keep, 0)) < 0)
        goto declined;
    raw = rebuild(&r, PySequence_Fast_ITEMS(keep), PySequence_Fast_GET_SIZE(keep),
                  &max_timestamp);
    if (raw != NULL)
        result = Py_BuildValue("(OLL)", raw, (long long)r.base_timestamp,
                               (long long)max_timestamp);
    goto done;
declined:
    PyErr_Clear();
    scan_error(DECLINED);
done:
    for (int v = 0; v < held; v++)
        PyBuffer_Release(&views[v]);
    Py_XDECREF(keep);
    Py_XDECREF(raw);
    return result;
}

/* ---- decode_batch ----------------------------------------------------------------------- */

/* The RecordBatch field values in order, or -1 where batch.decode_batch would raise. */
static int
batch_fields(PyObject *buf, const uint8_t *h, int64_t position, Py_ssize_t remaining,
             PyObject **values)
{
    int16_t attributes = (int16_t)be(h + 21, 2);
    int32_t batch_length = (int32_t)be(h + 8, 4), records_count = (int32_t)be(h + 57, 4);
    PyObject *view;
    if (h[16] != 2 || attributes < 0 || attributes > 0x7F || (attributes & 0x07) > 4
        || batch_length < MIN_BATCH_LENGTH || records_count < 0
        || (Py_ssize_t)batch_length + LOG_OVERHEAD > remaining)
        return -1;
    values[0] = PyLong_FromLongLong(position);
    values[1] = PyLong_FromLongLong((int64_t)be(h, 8));
    values[2] = PyLong_FromLong(batch_length);
    values[3] = PyLong_FromLong((int32_t)be(h + 12, 4));
    values[4] = PyLong_FromLong(2);
    values[5] = PyLong_FromUnsignedLong((uint32_t)be(h + 17, 4));
    values[6] = PyLong_FromLong(attributes);
    values[7] = PyLong_FromLong((int32_t)be(h + 23, 4));
    values[8] = PyLong_FromLongLong((int64_t)be(h + 27, 8));
    values[9] = PyLong_FromLongLong((int64_t)be(h + 35, 8));
    values[10] = PyLong_FromLongLong((int64_t)be(h + 43, 8));
    values[11] = PyLong_FromLong((int16_t)be(h + 51, 2));
    values[12] = PyLong_FromLong((int32_t)be(h + 53, 4));
    values[13] = PyLong_FromLong(records_count);
    view = PyMemoryView_FromObject(buf);  /* memoryview(buf)[position : position + size] */
    values[14] = view == NULL ? NULL
        : PySequence_GetSlice(view, (Py_ssize_t)position,
                              (Py_ssize_t)position + batch_length + LOG_OVERHEAD);
    Py_XDECREF(view);
    return 0;
}

/* cls() without its __init__: each slot set through its member descriptor, which is what the
 * frozen dataclass's own __init__ does (object.__setattr__), minus the Python frames. */
static PyObject *
fill_slots(PyTypeObject *cls, PyObject *slots, PyObject **values)
{
    PyObject *obj = cls->tp_alloc(cls, 0);
    for (int k = 0; obj != NULL && k < N_BATCH_FIELDS; k++) {
        PyObject *descr = PyTuple_GET_ITEM(slots, k);
        if (Py_TYPE(descr)->tp_descr_set(descr, obj, values[k]) < 0)
            Py_CLEAR(obj);
    }
    return obj;
}

static int
slots_ok(PyObject *cls, PyObject *slots)
{
    if (!PyType_Check(cls) || !PyTuple_CheckExact(slots)
        || PyTuple_GET_SIZE(slots) != N_BATCH_FIELDS)
        return -1;
    for (int k = 0; k < N_BATCH_FIELDS; k++)
        if (!Py_IS_TYPE(PyTuple_GET_ITEM(slots, k), &PyMemberDescr_Type))
            return -1;
    return 0;
}

PyDoc_STRVAR(decode_batch_doc,
"decode_batch(buf, position, cls, slots) -> cls instance\n\n"
"batch.decode_batch for a well-formed v2 header; slots: cls's member descriptors in field\n"
"order. Raises ScanError(-1) where the reference would raise (or for other arguments).");

static PyObject *
decode_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    int64_t position;
    PyObject *values[N_BATCH_FIELDS] = {NULL}, *result = NULL;
    int built;
    if (check_nargs("decode_batch", nargs, 4) < 0)
        return NULL;
    if (as_int64(args[1], &position) < 0 || slots_ok(args[2], args[3]) < 0
        || get_bytes(args[0], &view) < 0)
        return scan_error(DECLINED);
    built = position >= 0 && view.len - position >= RECORD_BATCH_OVERHEAD
        && batch_fields(args[0], (const uint8_t *)view.buf + position, position,
                        view.len - (Py_ssize_t)position, values) == 0;
    PyBuffer_Release(&view);
    if (!built)
        return scan_error(DECLINED);
    for (int k = 0; k < N_BATCH_FIELDS; k++)
        if (values[k] == NULL)
            goto done;
    result = fill_slots((PyTypeObject *)args[2], args[3], values);
done:
    for (int k = 0; k < N_BATCH_FIELDS; k++)
        Py_XDECREF(values[k]);
    return result;
}

/* ---- batch_headers: the facts of a log of plain batches ------------------------------------ */

PyDoc_STRVAR(batch_headers_doc,
"batch_headers(buf, start, end) -> (position, rows bytes)\n\n"
"From position start (a batch boundary) while a batch starts before end, each one decode_batch takes\n"
"(v2, sizes inside the data: it may end past end) and not a control batch: per batch (position, base\n"
"offset, last offset, max timestamp, 1 if its CRC-32C matches else 0) as native int64, positions in\n"
"buf. Returns where it stopped.");

/* `start` and `end` as positions in the buffer, 0 <= start <= end <= its length; -1 otherwise. */
static int
window_of(const Py_buffer *view, PyObject *start_obj, PyObject *end_obj, Py_ssize_t *start, Py_ssize_t *end)
{
    int64_t first, last;
    if (as_int64(start_obj, &first) < 0 || as_int64(end_obj, &last) < 0
        || first < 0 || first > last || last > (int64_t)view->len)
        return -1;
    *start = (Py_ssize_t)first;
    *end = (Py_ssize_t)last;
    return 0;
}

/* The walk batch_headers and batch_producers share: from `start`, while a batch starts before `end`
 * (the caller's window: a batch may end past it, inside the buffer) and is one decode_batch takes with
 * none of the attribute bits `refused`, a row of five native int64 a batch: position, base offset,
 * last offset, max timestamp, then whether its CRC-32C matches (check_crc) or else its producer id.
 * Returns (where it stopped, rows), or NULL with an error set. */
static PyObject *
header_rows(const Py_buffer *view, Py_ssize_t start, Py_ssize_t end, int refused, int check_crc)
{
    Grow rows = {0};
    Py_ssize_t position = start;
    PyObject *result = NULL;
    const uint8_t *d = (const uint8_t *)view->buf;
    while (position < end) {
        const uint8_t *h = d + position;
        Py_ssize_t remaining = view->len - position, size;
        int16_t attributes;
        int32_t batch_length;
        int64_t base_offset, last_offset, last_column;
        if (remaining < RECORD_BATCH_OVERHEAD)
            break;
        attributes = (int16_t)be(h + 21, 2);
        batch_length = (int32_t)be(h + 8, 4);
        base_offset = (int64_t)be(h, 8);
        if (h[16] != 2 || attributes < 0 || attributes > 0x7F || (attributes & 0x07) > 4
            || (attributes & refused) != 0 || batch_length < MIN_BATCH_LENGTH
            || (int32_t)be(h + 57, 4) < 0 || (Py_ssize_t)batch_length + LOG_OVERHEAD > remaining
            || __builtin_add_overflow(base_offset, (int64_t)(int32_t)be(h + 23, 4), &last_offset))
            break;
        size = (Py_ssize_t)batch_length + LOG_OVERHEAD;
        if (check_crc)
            last_column = crc32c_of(h + 21, size - 21) == (uint32_t)be(h + 17, 4);
        else
            last_column = (int64_t)be(h + 43, 8);  /* producer id */
        if (grow(&rows, 5 * 8) < 0)
            goto done;
        {
            int64_t row[5] = {position, base_offset, last_offset, (int64_t)be(h + 35, 8), last_column};
            memcpy(rows.data + rows.size, row, sizeof row);
            rows.size += sizeof row;
        }
        position += size;
    }
    result = Py_BuildValue("(ny#)", position, rows.data ? rows.data : "", rows.size);
done:
    PyMem_Free(rows.data);
    return result;
}

static PyObject *
batch_headers(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    PyObject *result;
    Py_ssize_t start, end;
    if (check_nargs("batch_headers", nargs, 3) < 0)
        return NULL;
    if (get_bytes(args[0], &view) < 0)
        return scan_error(DECLINED);
    if (window_of(&view, args[1], args[2], &start, &end) < 0) {
        PyBuffer_Release(&view);
        return scan_error(DECLINED);
    }
    result = header_rows(&view, start, end, 0x20, 1);  /* not control */
    PyBuffer_Release(&view);
    return result;
}

/* ---- batch_producers: the producer facts of a log of plain data batches -------------------- */

PyDoc_STRVAR(batch_producers_doc,
"batch_producers(buf, start, end) -> (position, rows bytes)\n\n"
"From position start (a batch boundary) while a batch starts before end, each one decode_batch takes\n"
"(v2, sizes inside the data) and neither a control nor a transactional batch: per batch (position,\n"
"base offset, last offset, max timestamp, producer id) as native int64. No CRC is computed. Returns\n"
"where it stopped.");

static PyObject *
batch_producers(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    PyObject *result;
    Py_ssize_t start, end;
    if (check_nargs("batch_producers", nargs, 3) < 0)
        return NULL;
    if (get_bytes(args[0], &view) < 0)
        return scan_error(DECLINED);
    if (window_of(&view, args[1], args[2], &start, &end) < 0) {
        PyBuffer_Release(&view);
        return scan_error(DECLINED);
    }
    result = header_rows(&view, start, end, 0x30, 0);  /* neither transactional nor control */
    PyBuffer_Release(&view);
    return result;
}

/* ---- metadata_rows: the KRaft metadata log's records, read without a Python call each ------- */

PyDoc_STRVAR(metadata_rows_doc,
"metadata_rows(buf, start, end, min_offset, next_offset, stop_at_control, kinds)\n"
"    -> (position, next_offset, batches, rows bytes, unknown bytes)\n\n"
"From position start (a batch boundary) while a batch starts before end: each uncompressed v2 batch\n"
"decode_batch takes, whose records decode_records takes and each of whose values starts with the\n"
"metadata frame (frame version 1, api key, version: unsigned varints inside the value). A batch whose\n"
"last offset is below min_offset is passed over unread. The walk stops before a batch it does not\n"
"take, a batch past next_offset (a gap: base offset > next offset so far), and, with stop_at_control,\n"
"a control batch (else a control batch only moves next_offset). Per record at or above min_offset of\n"
"a data batch, by kinds[api key] (bytes of 256; api keys past 255 count as unknown): 255: a row of seven\n"
"native int64 (offset, api key, version, value start, value end in buf, unknown entries before it, the\n"
"batch's position);\n"
"v < 255: nothing for a version below v, else an unknown entry (its api key as native int64).\n"
"Returns where it stopped, next_offset after the batches taken, how many it took and the two columns.");

#define METADATA_ROW 7
#define KIND_READ 255

/* The unsigned varint at p, inside [p, n): at most five bytes, the low 32 bits kept (as
 * decode_unsigned_varint); -1 when it is longer or runs past n. */
static inline int
read_uvarint32(const uint8_t *d, Py_ssize_t n, Py_ssize_t *p, int64_t *value)
{
    uint32_t result = 0;
    for (int k = 0; k < VARINT_MAX_BYTES; k++) {
        uint8_t byte;
        if (*p >= n)
            return -1;
        byte = d[(*p)++];
        result |= (uint32_t)(byte & 0x7F) << (7 * k);
        if (byte < 0x80) {
            *value = result;
            return 0;
        }
    }
    return -1;
}

/* A nullable length-prefixed field inside [p, end): -1 when the length varint or the bytes run past
 * it; *null set when the length is negative. */
static inline int
skip_field(const uint8_t *d, Py_ssize_t end, Py_ssize_t *p, int *null, Py_ssize_t *start)
{
    int32_t size;
    Py_ssize_t q, err;
    if (read_varint(d, end, *p, *p, &size, &q, &err) < 0)
        return -1;
    *null = size < 0;
    *start = q;
    if (size > 0 && size > end - q)
        return -1;
    *p = size > 0 ? q + size : q;
    return 0;
}

typedef struct {
    Grow rows, unknown;
    int64_t unknown_count;
    const uint8_t *kinds;
} MetadataColumns;

static inline int
push_int64s(Grow *g, const int64_t *values, Py_ssize_t count)
{
    if (grow(g, 8 * count) < 0)
        return -1;
    memcpy(g->data + g->size, values, (size_t)(8 * count));
    g->size += 8 * count;
    return 0;
}

/* One record of an uncompressed batch at p (the records end at n), as decode_record reads it, the
 * value's metadata frame too; its row or unknown entry added when its offset is at least min_offset.
 * Returns the next record's position, 0 when the reference would refuse it or it is not plain (the
 * batch is then left to the reference), or -1 with MemoryError set. */
static Py_ssize_t
metadata_record(const uint8_t *d, Py_ssize_t n, Py_ssize_t p, int64_t base_offset, int64_t min_offset,
                Py_ssize_t batch_position, MetadataColumns *out)
{
    int32_t length, offset_delta, headers;
    int64_t timestamp_delta, offset, frame, api_key, version;
    Py_ssize_t q, end, err, value, value_end, field;
    int null, kind;
    if (read_varint(d, n, p, p, &length, &q, &err) < 0 || length < 1 || length > n - q)
        return 0;
    end = q + length;
    if (read_varlong(d, end, q + 1, p, &timestamp_delta, &q, &err) < 0
        || read_varint(d, end, q, p, &offset_delta, &q, &err) < 0
        || __builtin_add_overflow(base_offset, (int64_t)offset_delta, &offset)
        || skip_field(d, end, &q, &null, &field) < 0                /* key */
        || skip_field(d, end, &q, &null, &value) < 0 || null)       /* value: a null one is refused */
        return 0;
    value_end = q;
    if (read_varint(d, end, q, p, &headers, &q, &err) < 0 || headers < 0 || headers > end - q)
        return 0;
    for (int32_t h = 0; h < headers; h++) {
        if (skip_field(d, end, &q, &null, &field) < 0 || null        /* header key: never null */
            || skip_field(d, end, &q, &null, &field) < 0)
            return 0;
    }
    if (q != end)
        return 0;
    q = value;
    if (read_uvarint32(d, value_end, &q, &frame) < 0 || frame != 1
        || read_uvarint32(d, value_end, &q, &api_key) < 0 || read_uvarint32(d, value_end, &q, &version) < 0)
        return 0;
    if (offset < min_offset)
        return end;
    kind = api_key < 256 ? out->kinds[api_key] : 0;
    if (kind == KIND_READ) {
        int64_t row[METADATA_ROW] = {offset, api_key, version, batch_position + value,
                                     batch_position + value_end, out->unknown_count, batch_position};
        if (push_int64s(&out->rows, row, METADATA_ROW) < 0)
            return -1;
    }
    else if (version >= kind) {
        if (push_int64s(&out->unknown, &api_key, 1) < 0)
            return -1;
        out->unknown_count++;
    }
    return end;
}

/* The records of one uncompressed data batch (its bytes d[0:n] from the header on): 1 when every one
 * is taken, 0 when the batch is left to the reference (the columns then as before it), -1 on error. */
static int
metadata_batch(const uint8_t *h, Py_ssize_t n, Py_ssize_t position, int64_t min_offset,
               MetadataColumns *out)
{
    Py_ssize_t rows = out->rows.size, unknown = out->unknown.size, p = RECORD_BATCH_OVERHEAD;
    int64_t unknown_count = out->unknown_count, base_offset = (int64_t)be(h, 8);
    int32_t count = (int32_t)be(h + 57, 4);
    for (int32_t i = 0; i < count; i++) {
        Py_ssize_t next = p < n ? metadata_record(h, n, p, base_offset, min_offset, position, out) : 0;
        if (next < 0)
            return -1;
        if (next == 0) {
            out->rows.size = rows;
            out->unknown.size = unknown;
            out->unknown_count = unknown_count;
            return 0;
        }
        p = next;
    }
    if (p != n) {
        out->rows.size = rows;
        out->unknown.size = unknown;
        out->unknown_count = unknown_count;
        return 0;
    }
    return 1;
}

static PyObject *
metadata_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view, kinds;
    Py_ssize_t start, end, position;
    int64_t min_offset, next_offset, batches = 0;
    int stop_at_control;
    MetadataColumns out = {0};
    PyObject *result = NULL;
    if (check_nargs("metadata_rows", nargs, 7) < 0)
        return NULL;
    if (as_int64(args[3], &min_offset) < 0 || as_int64(args[4], &next_offset) < 0
        || (stop_at_control = PyObject_IsTrue(args[5])) < 0 || get_bytes(args[0], &view) < 0) {
        PyErr_Clear();
        return scan_error(DECLINED);
    }
    if (get_bytes(args[6], &kinds) < 0) {
        PyBuffer_Release(&view);
        return scan_error(DECLINED);
    }
    if (kinds.len != 256 || window_of(&view, args[1], args[2], &start, &end) < 0) {
        PyBuffer_Release(&kinds);
        PyBuffer_Release(&view);
        return scan_error(DECLINED);
    }
    out.kinds = (const uint8_t *)kinds.buf;
    for (position = start; position < end;) {
        const uint8_t *h = (const uint8_t *)view.buf + position;
        Py_ssize_t remaining = view.len - position, size;
        int16_t attributes;
        int32_t batch_length;
        int64_t base_offset, last_offset;
        int taken;
        if (remaining < RECORD_BATCH_OVERHEAD)
            break;
        attributes = (int16_t)be(h + 21, 2);
        batch_length = (int32_t)be(h + 8, 4);
        base_offset = (int64_t)be(h, 8);
        if (h[16] != 2 || attributes < 0 || attributes > 0x7F || (attributes & 0x07) != 0
            || batch_length < MIN_BATCH_LENGTH || (int32_t)be(h + 57, 4) < 0
            || (Py_ssize_t)batch_length + LOG_OVERHEAD > remaining
            || __builtin_add_overflow(base_offset, (int64_t)(int32_t)be(h + 23, 4), &last_offset)
            || last_offset == INT64_MAX)
            break;
        size = (Py_ssize_t)batch_length + LOG_OVERHEAD;
        if (last_offset < min_offset) {  /* already in the snapshot: passed over unread */
            position += size;
            continue;
        }
        if (base_offset > next_offset || (stop_at_control && (attributes & 0x20)))
            break;
        if (!(attributes & 0x20)) {
            taken = metadata_batch(h, size, position, min_offset, &out);
            if (taken < 0)
                goto done;
            if (taken == 0)
                break;
        }
        if (last_offset + 1 > next_offset)
            next_offset = last_offset + 1;
        batches++;
        position += size;
    }
    result = Py_BuildValue("(nLLy#y#)", position, (long long)next_offset, (long long)batches,
                           out.rows.data ? out.rows.data : "", out.rows.size,
                           out.unknown.data ? out.unknown.data : "", out.unknown.size);
done:
    PyMem_Free(out.rows.data);
    PyMem_Free(out.unknown.data);
    PyBuffer_Release(&kinds);
    PyBuffer_Release(&view);
    return result;
}

/* ---- module ----------------------------------------------------------------------------- */

/* ---- crc32c: common.h's CRC-32C, for its tests ------------------------------------------- */

PyDoc_STRVAR(crc32c_doc,
"crc32c(buf, portable) -> int\n\n"
"CRC-32C of buf as every kernel computes it (common.h): the CPU's instruction where it has one,\n"
"or with portable true the table path every CPU has.");

static PyObject *
crc32c(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    uint32_t crc;
    int portable;
    if (check_nargs("crc32c", nargs, 2) < 0)
        return NULL;
    if ((portable = PyObject_IsTrue(args[1])) < 0 || get_bytes(args[0], &view) < 0) {
        PyErr_Clear();
        return scan_error(DECLINED);
    }
    crc = crc32c_with((const uint8_t *)view.buf, view.len, portable);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"crc32c", (PyCFunction)(void (*)(void))crc32c, METH_FASTCALL, crc32c_doc},
    {"scan_keys", (PyCFunction)(void (*)(void))scan_keys, METH_FASTCALL, scan_keys_doc},
    {"scan_key_digests", (PyCFunction)(void (*)(void))scan_key_digests, METH_FASTCALL,
     scan_key_digests_doc},
    {"scan_records", (PyCFunction)(void (*)(void))scan_records, METH_FASTCALL,
     scan_records_doc},
    {"rebuild_records", (PyCFunction)(void (*)(void))rebuild_records, METH_FASTCALL,
     rebuild_records_doc},
    {"decode_batch", (PyCFunction)(void (*)(void))decode_batch, METH_FASTCALL, decode_batch_doc},
    {"batch_headers", (PyCFunction)(void (*)(void))batch_headers, METH_FASTCALL,
     batch_headers_doc},
    {"batch_producers", (PyCFunction)(void (*)(void))batch_producers, METH_FASTCALL,
     batch_producers_doc},
    {"legacy_entries", (PyCFunction)(void (*)(void))legacy_entries, METH_FASTCALL,
     legacy_entries_doc},
    {"legacy_emit", (PyCFunction)(void (*)(void))legacy_emit, METH_FASTCALL, legacy_emit_doc},
    {"metadata_rows", (PyCFunction)(void (*)(void))metadata_rows, METH_FASTCALL, metadata_rows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kcompact.records.scan._accel",
    .m_doc = "Compiled kernels for kcompact.records.scan and .filter; see records/scan/accel.py.",
    .m_size = -1,  /* module state in statics: the array type, "q" and ScanError */
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__accel(void)
{
    PyObject *array_module = PyImport_ImportModule("array");
    if (array_module == NULL)
        return NULL;
    array_type = PyObject_GetAttrString(array_module, "array");
    Py_DECREF(array_module);
    typecode_q = PyUnicode_FromString("q");
    if (array_type == NULL || typecode_q == NULL)
        return NULL;
    return kcompact_module(&module_def, "kcompact.records.scan._accel.ScanError");
}
