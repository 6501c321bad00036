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
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* XXH3-128, the offset map's key digest (cleaner/offset_map: key_digests), compiled in whole from the
 * vendored single-header xxHash 0.8 (BSD 2-Clause, its licence at the top of xxhash.h). */
#define XXH_INLINE_ALL
#include "xxhash.h"

#define MIN_RECORD_BODY 6  /* attributes + five 1-byte varints */
#define MIN_RECORD_SIZE 7  /* the length varint + the smallest body */
#define VARINT_MAX_BYTES 5
#define VARLONG_MAX_BYTES 10
#define DECLINED (-1)      /* ScanError position: arguments the kernel does not take */

static PyObject *ScanError;     /* kcompact.records.scan._accel.ScanError */
static PyObject *array_type;    /* array.array */
static PyObject *typecode_q;    /* "q" */

/* Raise ScanError(position); always returns NULL. */
static PyObject *
scan_error(Py_ssize_t position)
{
    PyObject *arg = PyLong_FromSsize_t(position);
    if (arg != NULL) {
        PyErr_SetObject(ScanError, arg);
        Py_DECREF(arg);
    }
    return NULL;
}

/* ---- arguments -------------------------------------------------------------------------- */

/* Our own wrappers always pass every argument; anything else is a bug, not data. */
static int
check_nargs(const char *name, Py_ssize_t nargs, Py_ssize_t expected)
{
    if (nargs == expected)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, expected, nargs);
    return -1;
}

/* An exact int in the int64 range (int subclasses, numpy integers and big ints are declined:
 * the reference's arithmetic on them is not int64 arithmetic). 0 on success. */
static int
as_int64(PyObject *obj, int64_t *out)
{
    int overflow = 0;
    long long value;
    if (!PyLong_CheckExact(obj))
        return -1;
    value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow != 0 || (value == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    *out = (int64_t)value;
    return 0;
}

/* A flat, contiguous buffer of single bytes whose len() is its size in bytes. 0 on success. */
static int
get_bytes(PyObject *obj, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return -1;
    }
    if (view->ndim != 1 || view->itemsize != 1) {
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* A flat buffer of native int64 (array('q'), or array('l') where long is 64 bits). */
/* A 1-d C-contiguous buffer of 8-byte integers whose format is `letter` or `alias` (numpy names
 * int64 q or l, uint64 Q or L); -1 without an exception when it is not one. */
static int
get_8byte_ints(PyObject *obj, Py_buffer *view, char letter, char alias)
{
    const char *format;
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return -1;
    }
    format = view->format == NULL ? "B" : view->format;
    if (view->ndim != 1 || view->itemsize != 8 || format[1] != '\0'
        || (format[0] != letter && format[0] != alias)) {
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* ---- varints ---------------------------------------------------------------------------- */

/* The unsigned base-128 value at v, read as records/scan/__init__.py does: its 1- and 2-byte fast paths index
 * the data directly (an IndexError there is reported at the record start `record`), longer
 * forms go through decode_varint/decode_varlong (errors at v). Keeps the low 64 bits, like
 * Java's shifts; callers keep the low 32 for a varint. 0 on success, else -1 with *err set. */
static inline int
read_raw(const uint8_t *d, Py_ssize_t n, Py_ssize_t v, Py_ssize_t record, int max_bytes,
         uint64_t *raw, Py_ssize_t *next, Py_ssize_t *err)
{
    uint64_t result = 0;
    int shift = 0;
    Py_ssize_t index = v;
    if (v >= n) {
        *err = record;
        return -1;
    }
    if (d[v] < 0x80) {
        *raw = d[v];
        *next = v + 1;
        return 0;
    }
    if (v + 1 >= n) {
        *err = record;
        return -1;
    }
    if (d[v + 1] < 0x80) {
        *raw = (uint64_t)(d[v] & 0x7F) | ((uint64_t)d[v + 1] << 7);
        *next = v + 2;
        return 0;
    }
    for (;;) {
        uint8_t byte;
        if (index >= n) {
            *err = v;
            return -1;
        }
        byte = d[index++];
        result |= (uint64_t)(byte & 0x7F) << shift;  /* shift <= 63: loop ends by 10 bytes */
        if (byte < 0x80) {
            *raw = result;
            *next = index;
            return 0;
        }
        shift += 7;
        if (index - v >= max_bytes) {
            *err = v;
            return -1;
        }
    }
}

static inline int
read_varint(const uint8_t *d, Py_ssize_t n, Py_ssize_t v, Py_ssize_t record, int32_t *value,
            Py_ssize_t *next, Py_ssize_t *err)
{
    uint64_t raw;
    uint32_t u;
    if (read_raw(d, n, v, record, VARINT_MAX_BYTES, &raw, next, err) < 0)
        return -1;
    u = (uint32_t)raw;
    *value = (int32_t)((u >> 1) ^ (0U - (u & 1U)));
    return 0;
}

static inline int
read_varlong(const uint8_t *d, Py_ssize_t n, Py_ssize_t v, Py_ssize_t record, int64_t *value,
             Py_ssize_t *next, Py_ssize_t *err)
{
    uint64_t raw;
    if (read_raw(d, n, v, record, VARLONG_MAX_BYTES, &raw, next, err) < 0)
        return -1;
    *value = (int64_t)((raw >> 1) ^ (0ULL - (raw & 1ULL)));
    return 0;
}

/* Zig-zag encodings, minimal, as encode_varlong / encode_varint write them. */
static inline Py_ssize_t
unsigned_size(uint64_t u)
{
    Py_ssize_t size = 1;
    while (u >= 0x80) {
        u >>= 7;
        size++;
    }
    return size;
}

static inline uint64_t
zigzag64(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);  /* gcc: >> of a negative is arithmetic */
}

static inline uint8_t *
put_unsigned(uint8_t *out, uint64_t u)
{
    while (u >= 0x80) {
        *out++ = (uint8_t)((u & 0x7F) | 0x80);
        u >>= 7;
    }
    *out++ = (uint8_t)u;
    return out;
}

/* ---- the record walk -------------------------------------------------------------------- */

/* What both scans read first: length, attributes, timestampDelta, offsetDelta. */
typedef struct {
    Py_ssize_t end;           /* position just past the record */
    Py_ssize_t body;          /* position of keyLength */
    int64_t timestamp_delta;
    int64_t offset;           /* base_offset + offsetDelta */
} RecordHead;

static inline int
read_head(const uint8_t *d, Py_ssize_t n, Py_ssize_t p, int64_t base_offset, RecordHead *head,
          Py_ssize_t *err)
{
    int32_t length, offset_delta;
    Py_ssize_t q;
    if (read_varint(d, n, p, p, &length, &q, err) < 0)
        return -1;
    head->end = q + length;
    if (head->end > n || head->end < q + MIN_RECORD_BODY) {
        *err = p;
        return -1;
    }
    if (read_varlong(d, n, q + 1, p, &head->timestamp_delta, &q, err) < 0)
        return -1;
    if (read_varint(d, n, q, p, &offset_delta, &q, err) < 0)
        return -1;
    if (__builtin_add_overflow(base_offset, (int64_t)offset_delta, &head->offset)) {
        *err = p;
        return -1;
    }
    head->body = q;
    return 0;
}

/* The reference's _prepare: count is not negative and the data could hold that many records. */
static inline int
check_count(int64_t count, Py_ssize_t n)
{
    return count >= 0 && count <= n / MIN_RECORD_SIZE ? 0 : -1;
}

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

/* ---- scan_key_digests ------------------------------------------------------------------- */

/* scan_keys' walk, keeping only keyed records at or above min_offset: their offsets and the
 * canonical (big-endian) XXH3-128 digests of their keys. Returns how many it kept, or -1 with
 * *err set (corrupt). `offsets` and `digests` have room for `count` entries. */
static Py_ssize_t
walk_key_digests(const uint8_t *d, Py_ssize_t n, int64_t base_offset, Py_ssize_t count,
                 int64_t min_offset, int64_t *offsets, uint8_t *digests, Py_ssize_t *err)
{
    Py_ssize_t p = 0, kept = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        RecordHead head;
        int32_t size;
        Py_ssize_t q;
        if (read_head(d, n, p, base_offset, &head, err) < 0)
            return -1;
        if (read_varint(d, n, head.body, p, &size, &q, err) < 0)
            return -1;
        if (size >= 0) {
            if (q + size > head.end) {
                *err = p;
                return -1;
            }
            if (head.offset >= min_offset) {
                XXH128_canonical_t canonical;
                XXH128_canonicalFromHash(&canonical, XXH3_128bits(d + q, (size_t)size));
                memcpy(digests + 16 * kept, canonical.digest, 16);
                offsets[kept++] = head.offset;
            }
        }
        else if (q > head.end) {
            *err = p;
            return -1;
        }
        p = head.end;
    }
    if (p != n) {
        *err = p;
        return -1;
    }
    return kept;
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

/* ---- scan_records ----------------------------------------------------------------------- */

enum { OFFSETS, TIMESTAMPS, KEY_STARTS, KEY_ENDS, RECORD_STARTS, BODY_STARTS, RECORD_ENDS,
       N_COLUMNS };

typedef struct {
    int64_t *column[N_COLUMNS];
    char *value_null;
    int log_append;          /* every timestamp is `timestamp` */
    int64_t timestamp;       /* the LogAppendTime, or base_timestamp */
} Columns;

static int
walk_records(const uint8_t *d, Py_ssize_t n, int64_t base_offset, Py_ssize_t count,
             Columns *c, Py_ssize_t *err)
{
    Py_ssize_t p = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        RecordHead head;
        int32_t size;
        Py_ssize_t q;
        if (read_head(d, n, p, base_offset, &head, err) < 0)
            return -1;
        c->column[RECORD_STARTS][i] = p;
        c->column[RECORD_ENDS][i] = head.end;
        c->column[OFFSETS][i] = head.offset;
        c->column[TIMESTAMPS][i] = c->log_append ? c->timestamp
            : (int64_t)((uint64_t)c->timestamp + (uint64_t)head.timestamp_delta);
        c->column[BODY_STARTS][i] = head.body;
        if (read_varint(d, n, head.body, p, &size, &q, err) < 0)
            return -1;
        c->column[KEY_STARTS][i] = size >= 0 ? q : -1;
        if (size >= 0)
            q += size;
        c->column[KEY_ENDS][i] = size >= 0 ? q : -1;
        if (size >= 0 && q > head.end) {
            *err = p;
            return -1;
        }
        if (read_varint(d, n, q, p, &size, &q, err) < 0)
            return -1;
        c->value_null[i] = size < 0;
        if (size >= 0)
            q += size;
        if (q > head.end) {
            *err = p;
            return -1;
        }
        p = head.end;
    }
    if (p != n) {
        *err = p;
        return -1;
    }
    return 0;
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

/* The v2 batch header (Kafka's DefaultRecordBatch), big-endian:
 *   0 base_offset int64   8 batch_length int32   12 partition_leader_epoch int32   16 magic int8
 *  17 crc uint32         21 attributes int16     23 last_offset_delta int32
 *  27 base_timestamp int64   35 max_timestamp int64   43 producer_id int64
 *  51 producer_epoch int16   53 base_sequence int32   57 records_count int32   61 records */
#define RECORD_BATCH_OVERHEAD 61
#define LOG_OVERHEAD 12
#define MIN_BATCH_LENGTH 49
#define N_BATCH_FIELDS 15  /* RecordBatch: position, the 13 header fields, buffer */

static inline uint64_t
be(const uint8_t *p, int size)
{
    uint64_t value = 0;
    for (int k = 0; k < size; k++)
        value = (value << 8) | p[k];
    return value;
}

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

/* ---- flush_puts: the offset map's flush, from its pending chunks to sorted distinct keys ------ */

/* A put as the flush sorts it: 16 bytes, hi and lo masked to the map's compared bits (its low
 * LOW_FREE_BITS bits then zero) holding the put's position there (the kernel declines
 * 2**LOW_FREE_BITS puts or more). `lo | position` orders as (lo, position), so a key's last put
 * ends its group; the flush's sort is the peak of a clean's memory. */
#define LOW_FREE_BITS 28

typedef struct {
    uint64_t hi, lo_at;
} PackedPut;

static inline int
packed_before(const PackedPut *a, const PackedPut *b)
{
    return a->hi != b->hi ? a->hi < b->hi : a->lo_at < b->lo_at;
}

static void
packed_sift_down(PackedPut *v, Py_ssize_t root, Py_ssize_t n)
{
    for (;;) {
        Py_ssize_t child = 2 * root + 1;
        PackedPut x;
        if (child >= n)
            return;
        if (child + 1 < n && packed_before(&v[child], &v[child + 1]))
            child++;
        if (!packed_before(&v[root], &v[child]))
            return;
        x = v[root];
        v[root] = v[child];
        v[child] = x;
        root = child;
    }
}

static void
packed_sort_bucket(PackedPut *v, Py_ssize_t n)
{
    if (n > 32) {
        for (Py_ssize_t i = 1; i < n; i++)
            if (packed_before(&v[i], &v[i - 1])) {
                for (Py_ssize_t k = n / 2; k-- > 0;)
                    packed_sift_down(v, k, n);
                for (Py_ssize_t end = n - 1; end > 0; end--) {
                    PackedPut x = v[0];
                    v[0] = v[end];
                    v[end] = x;
                    packed_sift_down(v, 0, end);
                }
                return;
            }
        return;
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        PackedPut x = v[i];
        Py_ssize_t j = i;
        while (j > 0 && packed_before(&x, &v[j - 1])) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
}

#define LOW_MASK (((uint64_t)1 << LOW_FREE_BITS) - 1)

static inline int
packed_same_key(const PackedPut *a, const PackedPut *b)
{
    return a->hi == b->hi && (a->lo_at & ~LOW_MASK) == (b->lo_at & ~LOW_MASK);
}

/* A 1-d C-contiguous buffer of `itemsize`-byte items whose format letter is one of `letters`
 * (writable when asked); -1 without an exception when it is not one. */
static int
get_column(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, const char *letters, int writable)
{
    const char *format;
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Clear();
        return -1;
    }
    format = view->format == NULL ? "B" : view->format;
    if (view->ndim != 1 || view->itemsize != itemsize || format[0] == '\0' || format[1] != '\0'
        || strchr(letters, format[0]) == NULL) {
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

#define PREFETCH_AHEAD 16  /* puts the flush's scatter looks ahead */
#define BLOCK_SHIFT 12  /* positions a chunk-table entry covers (flush_puts finds a put's chunk) */

#if defined(__linux__)
#include <sys/mman.h>
#endif

/* PyMem_Malloc, asking for huge pages when big (as numpy does for its arrays): the flush scatters
 * its puts over the whole buffer, and fresh 4 KiB pages cost a fault each. */
static void *
big_malloc(size_t size)
{
    void *p = PyMem_Malloc(size > 0 ? size : 1);
#if defined(MADV_HUGEPAGE)
    if (p != NULL && size >= ((size_t)4 << 20)) {
        uintptr_t page = (uintptr_t)1 << 21, first = ((uintptr_t)p + page - 1) & ~(page - 1),
                  end = ((uintptr_t)p + size) & ~(page - 1);
        if (end > first)
            madvise((void *)first, end - first, MADV_HUGEPAGE);  /* a hint: failure is harmless */
    }
#endif
    return p;
}

/* An uninitialised bytes object of `size` bytes, its pages as big_malloc's. */
static PyObject *
big_bytes(Py_ssize_t size)
{
    PyObject *b = PyBytes_FromStringAndSize(NULL, size);
#if defined(MADV_HUGEPAGE)
    if (b != NULL && size >= ((Py_ssize_t)4 << 20)) {
        uintptr_t page = (uintptr_t)1 << 21, start = (uintptr_t)PyBytes_AS_STRING(b),
                  first = (start + page - 1) & ~(page - 1), end = (start + (size_t)size) & ~(page - 1);
        if (end > first)
            madvise((void *)first, end - first, MADV_HUGEPAGE);
    }
#endif
    return b;
}

/* The pending chunks' buffers: hi, lo (uint64) and offsets (int64) of each, and where each
 * chunk's puts begin (`first[k]`; `first[chunks]`: all puts). */
typedef struct {
    Py_ssize_t chunks, acquired;
    Py_buffer *views;  /* 3 a chunk */
    Py_ssize_t *first;
} Chunks;

static void
chunks_release(Chunks *c)
{
    for (Py_ssize_t i = 0; i < c->acquired; i++)
        PyBuffer_Release(&c->views[i]);
    PyMem_Free(c->views);
    PyMem_Free(c->first);
}

/* Acquire a list of (hi, lo, offsets) tuples of one length each; 0, or -1 (declined, or an error
 * set: MemoryError) with everything released. */
static int
chunks_acquire(PyObject *list, Chunks *c)
{
    memset(c, 0, sizeof(*c));
    if (!PyList_CheckExact(list))
        return -1;
    c->chunks = PyList_GET_SIZE(list);
    c->views = PyMem_Calloc((size_t)c->chunks * 3 + 1, sizeof(Py_buffer));
    c->first = PyMem_Calloc((size_t)c->chunks + 1, sizeof(Py_ssize_t));
    if (c->views == NULL || c->first == NULL) {
        chunks_release(c);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < c->chunks; k++) {
        PyObject *item = PyList_GET_ITEM(list, k);
        Py_buffer *v = &c->views[3 * k];
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 3)
            goto declined;
        for (int j = 0; j < 3; j++) {
            if (get_8byte_ints(PyTuple_GET_ITEM(item, j), &v[j], j < 2 ? 'Q' : 'q', j < 2 ? 'L' : 'l') < 0)
                goto declined;
            c->acquired++;
        }
        if (v[1].len != v[0].len || v[2].len != v[0].len)
            goto declined;
        c->first[k + 1] = c->first[k] + v[0].len / 8;
    }
    return 0;
declined:
    chunks_release(c);
    return -1;
}

PyDoc_STRVAR(flush_puts_doc,
"flush_puts(chunks, implied_bits) -> (hi, key, mid, low, offsets): bytes\n\n"
"offset_map's flush: `chunks` is a list of (hi, lo, offsets) tuples (uint64, uint64, int64\n"
"arrays of one length), the puts in order. For each distinct key (hi and the top\n"
"implied_bits + 24 bits of lo), in ascending order, its last put: hi (native uint64), the\n"
"run's key (hi << implied_bits | lo >> (64 - implied_bits), uint64), mid (the next 16 bits of\n"
"lo, uint16), low (the next 8, uint8) and the put's offset (int64).\n"
"Raises ScanError(-1) for arguments it does not take (the caller then uses numpy).");

static PyObject *
flush_puts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Chunks c;
    PyObject *cols[5] = {NULL, NULL, NULL, NULL, NULL}, *result = NULL;
    PackedPut *puts = NULL;
    uint32_t *starts = NULL;  /* fewer than 2**LOW_FREE_BITS puts */
    Py_ssize_t *block_chunk = NULL, n, groups = 0, buckets;
    uint64_t mask;
    int64_t first_offset = 0, previous = INT64_MIN;
    long s;
    int bits = 1, by_offset = 1;
    if (check_nargs("flush_puts", nargs, 2) < 0)
        return NULL;
    s = PyLong_CheckExact(args[1]) ? PyLong_AsLong(args[1]) : -1;
    if (s < 1 || s + 24 > 64 - LOW_FREE_BITS) {  /* the compared bits must leave lo's low bits free */
        PyErr_Clear();
        return scan_error(DECLINED);
    }
    if (chunks_acquire(args[0], &c) < 0)
        return PyErr_Occurred() ? NULL : scan_error(DECLINED);
    n = c.first[c.chunks];
    if (n > (Py_ssize_t)LOW_MASK) {
        scan_error(DECLINED);
        goto done;
    }
    mask = ~(uint64_t)0 << (64 - (s + 24));
    while (bits < 20 && ((Py_ssize_t)1 << (bits + 2)) < n)  /* ~4 to 8 puts a bucket; 4 MiB at most */
        bits++;
    buckets = (Py_ssize_t)1 << bits;
    starts = PyMem_Calloc((size_t)buckets + 1, sizeof(uint32_t));
    block_chunk = PyMem_Malloc(((size_t)(n >> BLOCK_SHIFT) + 1) * sizeof(Py_ssize_t));
    puts = big_malloc((size_t)n * sizeof(PackedPut));
    if (starts == NULL || block_chunk == NULL || puts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* bucket by the top `bits` bits of hi (a stable counting sort), then sort each bucket; a put
     * keeps its offset past the first in lo's free bits when the offsets increase strictly (the
     * cleaner's puts: then they order as positions do) and span fewer than 2**LOW_FREE_BITS, else
     * its position (its offset is looked up at the end) */
    for (Py_ssize_t k = 0; k < c.chunks; k++) {
        const uint64_t *hi = c.views[3 * k].buf;
        const int64_t *off = c.views[3 * k + 2].buf;
        for (Py_ssize_t i = 0, m = c.first[k + 1] - c.first[k]; i < m; i++) {
            starts[(hi[i] >> (64 - bits)) + 1]++;
            by_offset &= off[i] > previous;
            previous = off[i];
        }
    }
    for (Py_ssize_t k = 0; k < c.chunks; k++)
        if (c.first[k + 1] > c.first[k]) {  /* the first chunk with a put */
            first_offset = ((const int64_t *)c.views[3 * k + 2].buf)[0];
            by_offset &= (uint64_t)previous - (uint64_t)first_offset <= LOW_MASK;
            break;
        }
    if (!by_offset)
        first_offset = 0;  /* lo's free bits hold the position */
    for (Py_ssize_t b = 0; b < buckets; b++)
        starts[b + 1] += starts[b];
    for (Py_ssize_t k = 0; k < c.chunks; k++) {  /* starts[b] ends as bucket b's end */
        const uint64_t *hi = c.views[3 * k].buf, *lo = c.views[3 * k + 1].buf;
        const int64_t *off = c.views[3 * k + 2].buf;
        for (Py_ssize_t i = 0, m = c.first[k + 1] - c.first[k], at = c.first[k]; i < m; i++) {
            PackedPut *p;
            if (i + PREFETCH_AHEAD < m)  /* the puts' slots are random: ask for them early */
                __builtin_prefetch(&puts[starts[hi[i + PREFETCH_AHEAD] >> (64 - bits)]], 1);
            p = &puts[starts[hi[i] >> (64 - bits)]++];
            p->hi = hi[i];
            p->lo_at = (lo[i] & mask)
                       | (by_offset ? (uint64_t)off[i] - (uint64_t)first_offset : (uint64_t)(at + i));
        }
    }
    for (Py_ssize_t b = 0, begin = 0; b < buckets; b++) {
        packed_sort_bucket(puts + begin, starts[b] - begin);
        begin = starts[b];
    }
    for (Py_ssize_t i = 0; i < n; i++)
        groups += i + 1 == n || !packed_same_key(&puts[i], &puts[i + 1]);
    for (Py_ssize_t b = 0, k = 0; b <= (n >> BLOCK_SHIFT); b++) {  /* the chunk of each block's first put */
        while (k + 1 < c.chunks && c.first[k + 1] <= (b << BLOCK_SHIFT))
            k++;
        block_chunk[b] = k;
    }
    cols[0] = big_bytes(groups * 8);
    cols[1] = big_bytes(groups * 8);
    cols[2] = big_bytes(groups * 2);
    cols[3] = big_bytes(groups);
    cols[4] = big_bytes(groups * 8);
    if (cols[0] && cols[1] && cols[2] && cols[3] && cols[4]) {
        uint64_t *hi = (uint64_t *)PyBytes_AS_STRING(cols[0]), *key = (uint64_t *)PyBytes_AS_STRING(cols[1]);
        uint16_t *mid = (uint16_t *)PyBytes_AS_STRING(cols[2]);
        uint8_t *low = (uint8_t *)PyBytes_AS_STRING(cols[3]);
        int64_t *off = (int64_t *)PyBytes_AS_STRING(cols[4]);
        for (Py_ssize_t i = 0, g = 0; i < n; i++) {  /* each key's last put */
            const PackedPut *p = &puts[i];
            uint64_t lo = p->lo_at & ~LOW_MASK;
            if (i + 1 < n && packed_same_key(p, &puts[i + 1]))
                continue;
            hi[g] = p->hi;
            key[g] = (p->hi << s) | (lo >> (64 - s));
            mid[g] = (uint16_t)(lo >> (48 - s));
            low[g] = (uint8_t)(lo >> (40 - s));
            off[g++] = (int64_t)((uint64_t)first_offset + (p->lo_at & LOW_MASK));  /* or position */
        }
        for (Py_ssize_t g = 0; g < groups && !by_offset; g++) {  /* then the offsets there */
            Py_ssize_t at = (Py_ssize_t)off[g], k = block_chunk[at >> BLOCK_SHIFT];
            while (c.first[k + 1] <= at)
                k++;
            off[g] = ((const int64_t *)c.views[3 * k + 2].buf)[at - c.first[k]];
        }
        result = PyTuple_Pack(5, cols[0], cols[1], cols[2], cols[3], cols[4]);
    }
done:
    for (int j = 0; j < 5; j++)
        Py_XDECREF(cols[j]);
    PyMem_Free(puts);
    PyMem_Free(block_chunk);
    PyMem_Free(starts);
    chunks_release(&c);
    return result;
}

/* ---- fold_into_run: the offset map's flush, its keys a run holds ------------------------------ */

enum { F_KEY, F_REST, F_STARTS, F_TOP, F_QKEY, F_MID, F_LOW, F_OFF, F_VIEWS };

PyDoc_STRVAR(fold_into_run_doc,
"fold_into_run(key, rest, starts, bits, base, top, qkey, mid, low, offsets)\n"
"    -> (found, top, qkey, mid, low, offsets)\n\n"
"offset_map's flush, for one run (runs.Run: `key` uint64, `rest` its items as uint8 (7 or 11\n"
"bytes a key: mid, low, then offset - base as uint32 or the offset as int64, little-endian),\n"
"`starts` uint32 or uint64, `bits` its directory bits, `base`): writes the offset of each query\n"
"key (runs.Query's columns top, qkey, mid, low: uint64, uint64, uint16, uint8, sorted, no\n"
"duplicates) the run holds into `rest`; returns how many it held and the other queries' columns\n"
"(bytes, native). Raises ScanError(-1) for arguments it does not take, among them offsets a\n"
"narrow run cannot hold (the caller then uses numpy); nothing is written then.");

static PyObject *
fold_into_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[F_VIEWS];
    static const struct { int arg; Py_ssize_t size; const char *letters; int writable; } spec[F_VIEWS] = {
        {0, 8, "QL", 0}, {1, 1, "B", 1}, {2, 0, "", 0}, {5, 8, "QL", 0}, {6, 8, "QL", 0},
        {7, 2, "H", 0}, {8, 1, "B", 0}, {9, 8, "ql", 0},
    };
    PyObject *cols[5] = {NULL, NULL, NULL, NULL, NULL}, *result = NULL;
    int acquired = 0, wide;
    long bits;
    int64_t base;
    Py_ssize_t n, q, width, found = 0, kept = 0;
    if (check_nargs("fold_into_run", nargs, 10) < 0)
        return NULL;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    return scan_error(DECLINED);  /* rest is little-endian */
#endif
    bits = PyLong_CheckExact(args[3]) ? PyLong_AsLong(args[3]) : -1;
    if (bits < 0 || bits > 40 || as_int64(args[4], &base) < 0) {
        PyErr_Clear();
        return scan_error(DECLINED);
    }
    for (; acquired < F_VIEWS; acquired++) {
        int ok;
        if (acquired == F_STARTS)  /* uint32 or uint64 */
            ok = get_column(args[2], &v[F_STARTS], 4, "I", 0) == 0
                 || get_column(args[2], &v[F_STARTS], 8, "QL", 0) == 0;
        else
            ok = get_column(args[spec[acquired].arg], &v[acquired], spec[acquired].size,
                            spec[acquired].letters, spec[acquired].writable) == 0;
        if (!ok) {
            scan_error(DECLINED);
            goto done;
        }
    }
    n = v[F_KEY].len / 8;
    q = v[F_TOP].len / 8;
    width = n > 0 ? v[F_REST].len / n : 0;
    wide = width == 11;
    if (n == 0 || v[F_REST].len != n * width || (width != 7 && width != 11)
        || v[F_STARTS].len / v[F_STARTS].itemsize != ((Py_ssize_t)1 << bits) + 1
        || v[F_QKEY].len != q * 8 || v[F_MID].len != q * 2 || v[F_LOW].len != q || v[F_OFF].len != q * 8) {
        scan_error(DECLINED);
        goto done;
    }
    {
        const uint64_t *key = v[F_KEY].buf, *top = v[F_TOP].buf, *qkey = v[F_QKEY].buf;
        const uint16_t *mid = v[F_MID].buf;
        const uint8_t *low = v[F_LOW].buf;
        const int64_t *off = v[F_OFF].buf;
        uint8_t *rest = v[F_REST].buf;
        const void *starts = v[F_STARTS].buf;
        int starts64 = v[F_STARTS].itemsize == 8;
        uint64_t *o_top, *o_key;
        uint16_t *o_mid;
        uint8_t *o_low;
        int64_t *o_off;
        Py_ssize_t last_start = starts64 ? (Py_ssize_t)((const uint64_t *)starts)[(Py_ssize_t)1 << bits]
                                         : (Py_ssize_t)((const uint32_t *)starts)[(Py_ssize_t)1 << bits];
        if ((starts64 ? ((const uint64_t *)starts)[0] : ((const uint32_t *)starts)[0]) != 0
            || last_start != n) {  /* a directory that is not this run's: never read past it */
            scan_error(DECLINED);
            goto done;
        }
        if (!wide)  /* every offset must fit the run's uint32 deltas: else numpy widens the run */
            for (Py_ssize_t i = 0; i < q; i++)
                if (off[i] < base || (uint64_t)off[i] - (uint64_t)base >= ((uint64_t)1 << 32)) {
                    scan_error(DECLINED);
                    goto done;
                }
        for (int k = 0; k < 5; k++) {  /* room for every query; shrunk to the keys not found */
            cols[k] = PyBytes_FromStringAndSize(NULL, q * (k == 2 ? 2 : k == 3 ? 1 : 8));
            if (cols[k] == NULL)
                goto done;
        }
        o_top = (uint64_t *)PyBytes_AS_STRING(cols[0]);
        o_key = (uint64_t *)PyBytes_AS_STRING(cols[1]);
        o_mid = (uint16_t *)PyBytes_AS_STRING(cols[2]);
        o_low = (uint8_t *)PyBytes_AS_STRING(cols[3]);
        o_off = (int64_t *)PyBytes_AS_STRING(cols[4]);
        for (Py_ssize_t i = 0; i < q; i++) {
            Py_ssize_t b = bits > 0 ? (Py_ssize_t)(top[i] >> (64 - bits)) : 0, first, end, stop;
            first = starts64 ? (Py_ssize_t)((const uint64_t *)starts)[b]
                             : (Py_ssize_t)((const uint32_t *)starts)[b];
            stop = end = starts64 ? (Py_ssize_t)((const uint64_t *)starts)[b + 1]
                                  : (Py_ssize_t)((const uint32_t *)starts)[b + 1];
            if (stop > n)  /* a directory out of order (not a run's): stay inside the keys */
                stop = end = n;
            if (first > end)
                first = end;
            while (first < end) {  /* the bucket's first key >= the query's */
                Py_ssize_t m = first + (end - first) / 2;
                if (key[m] < qkey[i])
                    first = m + 1;
                else
                    end = m;
            }
            for (; first < stop && key[first] == qkey[i]; first++) {  /* keys sharing bits 0-75 */
                uint8_t *r = rest + first * width;
                uint16_t r_mid;
                memcpy(&r_mid, r, 2);
                if (r_mid == mid[i] && r[2] == low[i])
                    break;
            }
            if (first < stop && key[first] == qkey[i]) {  /* held: its offset is this put's */
                if (wide) {
                    memcpy(rest + first * width + 3, &off[i], 8);
                } else {
                    uint32_t delta = (uint32_t)((uint64_t)off[i] - (uint64_t)base);
                    memcpy(rest + first * width + 3, &delta, 4);
                }
                found++;
                continue;
            }
            o_top[kept] = top[i];
            o_key[kept] = qkey[i];
            o_mid[kept] = mid[i];
            o_low[kept] = low[i];
            o_off[kept++] = off[i];
        }
        for (int k = 0; k < 5; k++)
            if (_PyBytes_Resize(&cols[k], kept * (k == 2 ? 2 : k == 3 ? 1 : 8)) < 0)
                goto done;  /* cols[k] is NULL then */
        result = Py_BuildValue("(nOOOOO)", found, cols[0], cols[1], cols[2], cols[3], cols[4]);
    }
done:
    for (int k = 0; k < 5; k++)
        Py_XDECREF(cols[k]);
    for (int k = 0; k < acquired; k++)
        PyBuffer_Release(&v[k]);
    return result;
}

/* ---- merge_runs_step: two runs of the offset map into one --------------------------------------- */

/* A run as (key, rest, starts, bits, base): runs.Run's arrays (rest as uint8), its directory bits
 * and base. */
typedef struct {
    Py_buffer views[3];
    int acquired, bits, starts64;
    const uint64_t *key;
    uint8_t *rest;
    const void *starts;
    Py_ssize_t n, width, buckets;
    int64_t base;
} RunView;

static void
run_release(RunView *r)
{
    for (int k = 0; k < r->acquired; k++)
        PyBuffer_Release(&r->views[k]);
    r->acquired = 0;
}

static inline Py_ssize_t
run_start(const RunView *r, Py_ssize_t b)
{
    return r->starts64 ? (Py_ssize_t)((const uint64_t *)r->starts)[b]
                       : (Py_ssize_t)((const uint32_t *)r->starts)[b];
}

/* Digest bits 0-63 of run r's key i, `*bucket` advanced to its bucket (from one at or before it). */
static inline uint64_t
run_top(const RunView *r, Py_ssize_t i, Py_ssize_t *bucket, long implied_bits)
{
    while (run_start(r, *bucket + 1) <= i)
        (*bucket)++;
    return ((uint64_t)*bucket << (64 - r->bits)) | (r->key[i] >> implied_bits);
}

/* Acquire a run tuple; `keys`: how many keys `key` has (-1: all of it; else it is padded longer).
 * 0, or -1 (declined) with everything released. */
static int
run_acquire(PyObject *tuple, RunView *r, Py_ssize_t keys, int writable)
{
    long bits;
    memset(r, 0, sizeof(*r));
    if (!PyTuple_CheckExact(tuple) || PyTuple_GET_SIZE(tuple) != 5)
        return -1;
    bits = PyLong_CheckExact(PyTuple_GET_ITEM(tuple, 3)) ? PyLong_AsLong(PyTuple_GET_ITEM(tuple, 3)) : -1;
    if (bits < 1 || bits > 40 || as_int64(PyTuple_GET_ITEM(tuple, 4), &r->base) < 0) {
        PyErr_Clear();
        return -1;
    }
    r->bits = (int)bits;
    if (get_column(PyTuple_GET_ITEM(tuple, 0), &r->views[0], 8, "QL", writable) < 0)
        return -1;
    r->acquired = 1;
    if (get_column(PyTuple_GET_ITEM(tuple, 1), &r->views[1], 1, "B", writable) < 0)
        goto declined;
    r->acquired = 2;
    if (get_column(PyTuple_GET_ITEM(tuple, 2), &r->views[2], 4, "I", writable) == 0)
        r->starts64 = 0;
    else if (get_column(PyTuple_GET_ITEM(tuple, 2), &r->views[2], 8, "QL", writable) == 0)
        r->starts64 = 1;
    else
        goto declined;
    r->acquired = 3;
    r->key = r->views[0].buf;
    r->rest = r->views[1].buf;
    r->starts = r->views[2].buf;
    r->n = keys < 0 ? r->views[0].len / 8 : keys;
    r->buckets = (Py_ssize_t)1 << bits;
    r->width = r->n > 0 ? r->views[1].len / r->n : 0;
    if (r->n > r->views[0].len / 8 || r->views[1].len != r->n * r->width
        || (r->width != 7 && r->width != 11)
        || r->views[2].len / r->views[2].itemsize != r->buckets + 1)
        goto declined;
    return 0;
declined:
    run_release(r);
    return -1;
}

PyDoc_STRVAR(merge_runs_step_doc,
"merge_runs_step(a, b, out, implied_bits, ia, ib, stop) -> (ia, ib)\n\n"
"offset_map's merge_runs: a, b and out are runs as (key, rest, starts, bits, base) (runs.Run's\n"
"arrays, rest as uint8; out's key is its padded array, its rest and keys uninitialised, its\n"
"starts zero and counting: out starts[1 + bucket] gains one a key). Writes the union of a and b\n"
"(no key in both), in digest order (a key of b before a's sharing its digest bits 0-75, as\n"
"merge_runs's numpy weave places it), from output slot ia + ib (a's keys from ia, b's from ib)\n"
"up to slot `stop`, and returns where a and b then stand. Raises ScanError(-1) for arguments it\n"
"does not take (the caller then uses numpy); nothing is written then.");

static PyObject *
merge_runs_step(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    RunView a, b, out;
    Py_ssize_t ia, ib, stop, o, ba, bb;
    long s;
    PyObject *result = NULL;
    if (check_nargs("merge_runs_step", nargs, 7) < 0)
        return NULL;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    return scan_error(DECLINED);  /* rest is little-endian */
#endif
    s = PyLong_CheckExact(args[3]) ? PyLong_AsLong(args[3]) : -1;
    ia = PyLong_CheckExact(args[4]) ? PyLong_AsSsize_t(args[4]) : -1;
    ib = PyLong_CheckExact(args[5]) ? PyLong_AsSsize_t(args[5]) : -1;
    stop = PyLong_CheckExact(args[6]) ? PyLong_AsSsize_t(args[6]) : -1;
    if (PyErr_Occurred() || s < 1 || s > 63 || ia < 0 || ib < 0 || stop < 0) {
        PyErr_Clear();
        return scan_error(DECLINED);
    }
    if (run_acquire(args[0], &a, -1, 0) < 0)
        return scan_error(DECLINED);
    if (run_acquire(args[1], &b, -1, 0) < 0) {
        run_release(&a);
        return scan_error(DECLINED);
    }
    if (run_acquire(args[2], &out, a.n + b.n, 1) < 0) {
        run_release(&a);
        run_release(&b);
        return scan_error(DECLINED);
    }
    if (a.bits < s || b.bits < s || out.bits < s || ia > a.n || ib > b.n || stop > a.n + b.n
        || out.width != (a.width == 11 || b.width == 11 ? 11 : 7)
        || run_start(&a, 0) != 0 || run_start(&a, a.buckets) != a.n  /* directories that are */
        || run_start(&b, 0) != 0 || run_start(&b, b.buckets) != b.n) {  /* not the runs': declined */
        scan_error(DECLINED);
        goto done;
    }
    {
        uint32_t *counts32 = out.starts64 ? NULL : (uint32_t *)out.starts + 1;
        uint64_t *counts64 = out.starts64 ? (uint64_t *)out.starts + 1 : NULL;
        Py_ssize_t lo_b, hi_b;
        uint64_t ta, tb;  /* digest bits 0-63 of a[ia] and b[ib] */
        /* the buckets of a[ia] and b[ib]: the last whose start is at most the position */
        for (lo_b = 0, hi_b = a.buckets; lo_b + 1 < hi_b;) {
            Py_ssize_t m = (lo_b + hi_b) / 2;
            if (run_start(&a, m) <= ia) lo_b = m; else hi_b = m;
        }
        ba = lo_b;
        for (lo_b = 0, hi_b = b.buckets; lo_b + 1 < hi_b;) {
            Py_ssize_t m = (lo_b + hi_b) / 2;
            if (run_start(&b, m) <= ib) lo_b = m; else hi_b = m;
        }
        bb = lo_b;
        ta = ia < a.n ? run_top(&a, ia, &ba, s) : 0;
        tb = ib < b.n ? run_top(&b, ib, &bb, s) : 0;
        for (o = ia + ib; o < stop; o++) {
            int take_a = ib >= b.n || (ia < a.n && (ta != tb ? ta < tb : a.key[ia] < b.key[ib]));
            /* (keys sharing digest bits 0-75: b's first, as merge_runs places them) */
            const RunView *r = take_a ? &a : &b;
            Py_ssize_t i = take_a ? ia : ib;
            uint64_t top = take_a ? ta : tb;
            const uint8_t *from = r->rest + i * r->width;
            uint8_t *to = out.rest + o * out.width;
            Py_ssize_t bucket = (Py_ssize_t)(top >> (64 - out.bits));
            ((uint64_t *)out.views[0].buf)[o] = r->key[i];
            if (counts32 != NULL)
                counts32[bucket]++;
            else
                counts64[bucket]++;
            if (r->width == 7 && out.width == 7) {  /* constant sizes: no call a key */
                memcpy(to, from, 7);
            } else if (r->width == 11) {
                memcpy(to, from, 11);
            } else {  /* a narrow run into a wide output: the offset itself */
                uint32_t delta;
                int64_t offset;
                memcpy(&delta, from + 3, 4);
                offset = (int64_t)((uint64_t)r->base + delta);
                memcpy(to, from, 3);
                memcpy(to + 3, &offset, 8);
            }
            if (take_a) {
                if (++ia < a.n)
                    ta = run_top(&a, ia, &ba, s);
            } else if (++ib < b.n) {
                tb = run_top(&b, ib, &bb, s);
            }
        }
        result = Py_BuildValue("(nn)", ia, ib);
    }
done:
    run_release(&a);
    run_release(&b);
    run_release(&out);
    return result;
}
/* ---- scan_window_key_digests: pass 1 over a run of plain batches ------------------------------ */

typedef struct {
    char *data;
    Py_ssize_t size, capacity;
} Grow;

/* Room for `more` bytes past g->size; 0, or -1 with MemoryError set. */
static int
grow(Grow *g, Py_ssize_t more)
{
    Py_ssize_t want = g->size + more, capacity = g->capacity > 0 ? g->capacity : 4096;
    char *data;
    if (want <= g->capacity)
        return 0;
    while (capacity < want)
        capacity *= 2;
    data = PyMem_Realloc(g->data, (size_t)capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    g->data = data;
    g->capacity = capacity;
    return 0;
}

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
#define ZSTD_FRAME_MAGIC 0xFD2FB528u
#define ZSTD_BLOCK_MAX (128 * 1024)  /* the most one block inflates to (RFC 8878) */

/* records.compression._zstd_one_block_bound (max_output 2**31): the output bound of one
 * decompression call when p[0, n) is exactly one zstd frame of one data block, alone or followed by
 * an empty last block, 0 otherwise. */
static Py_ssize_t
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
    if (!(block & 1) && end + 3 <= n && p[end] == 1 && p[end + 1] == 0 && p[end + 2] == 0)
        end += 3;  /* zstd-jni's stream: the data block, then an empty last block */
    else if (!(block & 1))
        return 0;  /* more data blocks */
    if (end + checksum != n)
        return 0;  /* more frames, or bytes after the frame */
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
static PyObject *
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

static int
decompressed(PyObject *fn, PyObject *zstd_fn, int codec, PyObject *source, PyObject **whole,
             Py_ssize_t start, Py_ssize_t n, PyObject **out)
{
    PyObject *view, *args[2], *value, *code;
    *out = NULL;
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
"scan_window_key_digests(buf, position, limit, min_offset, max_puts, base_puts, decompress, zstd)\n"
"    -> (position, offsets bytes, digests bytes, batches bytes)\n\n"
"Pass 1 (cleaner/round/mapping.iter_dirty_keys) over the batches starting at `position`, before\n"
"`limit`: while each is a well-framed, non-transactional, non-control v2 batch whose records scan\n"
"(compressed ones only with `decompress`, records.compression.decompress: called as (codec, payload)\n"
"for each, the kernel stopping before a batch it raises on; a zstd batch's usual stream first\n"
"through `zstd`, records.compression.zstd_one_call(), when given), the keyed records at or above\n"
"min_offset (scan_key_digests) and, per batch whose\n"
"last offset reaches min_offset, (put end counted from base_puts, last offset, records) as three\n"
"native int64. Stops before any other batch (the caller's per-batch walk takes it), at `limit`, or\n"
"after the batch that brings the puts to max_puts; returns where it stopped.");

static PyObject *
scan_window_key_digests(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    int64_t position, limit, min_offset, max_puts, base_puts;
    Grow offsets = {0}, digests = {0}, batches = {0};
    Py_ssize_t puts = 0, err;
    PyObject *result = NULL, *decompress_fn, *zstd_fn, *source_view = NULL;
    if (check_nargs("scan_window_key_digests", nargs, 8) < 0)
        return NULL;
    decompress_fn = args[6] == Py_None ? NULL : args[6];
    zstd_fn = args[7] == Py_None ? NULL : args[7];
    if (as_int64(args[1], &position) < 0 || as_int64(args[2], &limit) < 0
        || as_int64(args[3], &min_offset) < 0 || as_int64(args[4], &max_puts) < 0
        || as_int64(args[5], &base_puts) < 0
        || (decompress_fn != NULL && !PyCallable_Check(decompress_fn))
        || (zstd_fn != NULL && !PyCallable_Check(zstd_fn))
        || get_bytes(args[0], &view) < 0)
        return scan_error(DECLINED);
    const uint8_t *d = (const uint8_t *)view.buf;
    if (limit > view.len)
        limit = view.len;
    while (position >= 0 && position < limit && puts < max_puts) {
        const uint8_t *h = d + position;
        Py_ssize_t remaining = view.len - (Py_ssize_t)position, kept;
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
            if (codec != 0) {
                int got = decompressed(decompress_fn, zstd_fn, codec, args[0], &source_view,
                                       (Py_ssize_t)position + RECORD_BATCH_OVERHEAD, n, &inflated);
                if (got < 0)
                    goto done;
                if (got == 0)
                    break;  /* the per-batch walk raises the codec's error */
                records = (const uint8_t *)PyBytes_AS_STRING(inflated);
                n = PyBytes_GET_SIZE(inflated);
            }
            if (check_count(records_count, n) < 0
                || grow(&offsets, (Py_ssize_t)records_count * 8) < 0
                || grow(&digests, (Py_ssize_t)records_count * 16) < 0 || grow(&batches, 24) < 0) {
                Py_XDECREF(inflated);
                if (PyErr_Occurred())
                    goto done;
                break;  /* the per-batch walk reports it */
            }
            kept = walk_key_digests(records, n, base_offset, records_count,
                                    min_offset, (int64_t *)(offsets.data + offsets.size),
                                    (uint8_t *)(digests.data + digests.size), &err);
            Py_XDECREF(inflated);
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
    result = Py_BuildValue("(Ly#y#y#)", (long long)position, offsets.data ? offsets.data : "",
                           offsets.size, digests.data ? digests.data : "", digests.size,
                           batches.data ? batches.data : "", batches.size);
done:
    PyMem_Free(offsets.data);
    PyMem_Free(digests.data);
    PyMem_Free(batches.data);
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

/* CRC-32C of n bytes at p through the caller's function (records.crc.crc32c: the one checksum
 * implementation of both paths). 0, or -1 with a Python error set. */
static int
crc_of(PyObject *crc_fn, const uint8_t *p, Py_ssize_t n, uint32_t *crc)
{
    PyObject *view = PyMemoryView_FromMemory((char *)p, n, PyBUF_READ), *value;
    unsigned long long result;
    if (view == NULL)
        return -1;
    value = PyObject_CallOneArg(crc_fn, view);
    Py_DECREF(view);
    if (value == NULL)
        return -1;
    result = PyLong_AsUnsignedLongLong(value);
    Py_DECREF(value);
    if (result == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *crc = (uint32_t)result;
    return 0;
}

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

PyDoc_STRVAR(scan_window_records_doc,
"scan_window_records(buf, position, limit, max_batches, max_records, max_bytes, protected,\n"
"                    upper_bound, crc, decompress, zstd)\n"
"    -> (position, batches, offsets, timestamps, key_starts, key_ends, body_starts, record_ends,\n"
"        value_null, inflated)\n\n"
"Pass 2 (cleaner/round/filtering) over the batches starting at `position`, before `limit`: while\n"
"each is a well-framed, non-transactional, non-control v2 batch with records, a valid CRC (crc:\n"
"records.crc.crc32c), records that scan (scan_records; a compressed batch's only with\n"
"`decompress`, records.compression.decompress called as (codec, payload), a zstd batch's usual\n"
"stream first through `zstd` when given, and where it does not raise), a last offset not in the ascending int64 array `protected` and a next offset other than\n"
"upper_bound, its header fields (position, size, base offset, last offset, count, attributes, base\n"
"and max timestamp: native int64) and its records' columns (native int64; value_null one byte a\n"
"record). Record positions are absolute in buf, or, for a compressed batch's, len(buf) plus their\n"
"position in its records, decompressed: `inflated`, a list with one bytes a compressed batch, as\n"
"if its items were back to back after buf. Stops before any other\n"
"batch (the caller's per-batch walk takes it), at `limit`, or after max_batches batches or the\n"
"batch that brings the records to max_records or the bytes read and inflated to max_bytes.");

static PyObject *
scan_window_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view, prot;
    int64_t position, limit, max_batches, max_records, max_bytes, upper_bound, start;
    Grow batches = {0}, columns[N_WR_COLUMNS] = {{0}}, value_null = {0};
    Py_ssize_t records = 0, taken = 0, err, inflated_size = 0;
    PyObject *result = NULL, *crc_fn, *decompress_fn, *zstd_fn, *inflated = NULL, *source_view = NULL;
    if (check_nargs("scan_window_records", nargs, 11) < 0)
        return NULL;
    crc_fn = args[8];
    decompress_fn = args[9] == Py_None ? NULL : args[9];
    zstd_fn = args[10] == Py_None ? NULL : args[10];
    if (as_int64(args[1], &position) < 0 || as_int64(args[2], &limit) < 0
        || as_int64(args[3], &max_batches) < 0 || as_int64(args[4], &max_records) < 0
        || as_int64(args[5], &max_bytes) < 0 || as_int64(args[7], &upper_bound) < 0
        || !PyCallable_Check(crc_fn) || (decompress_fn != NULL && !PyCallable_Check(decompress_fn))
        || (zstd_fn != NULL && !PyCallable_Check(zstd_fn)) || get_bytes(args[0], &view) < 0)
        return scan_error(DECLINED);
    if (get_8byte_ints(args[6], &prot, 'q', 'l') < 0) {
        PyBuffer_Release(&view);
        return scan_error(DECLINED);
    }
    const uint8_t *d = (const uint8_t *)view.buf;
    if (limit > view.len)
        limit = view.len;
    inflated = PyList_New(0);
    if (inflated == NULL)
        goto done;
    start = position;
    while (position >= 0 && position < limit && taken < max_batches && records < max_records
           && position - start + inflated_size < max_bytes) {
        const uint8_t *h = d + position, *body;
        Py_ssize_t remaining = view.len - (Py_ssize_t)position, n, size;
        int16_t attributes;
        int32_t batch_length, count;
        int64_t base_offset, last_offset, next_offset, at;
        uint32_t crc;
        int codec;
        Columns c;
        PyObject *piece = NULL;  /* a compressed batch's records, decompressed */
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
        if (crc_of(crc_fn, h + 21, size - 21, &crc) < 0)
            goto done;
        if (crc != (uint32_t)be(h + 17, 4))
            break;  /* the per-batch walk reports it */
        n = size - RECORD_BATCH_OVERHEAD;
        body = h + RECORD_BATCH_OVERHEAD;
        at = position + RECORD_BATCH_OVERHEAD;
        if (codec != 0) {  /* the records: one more item of `inflated` (appended once scanned) */
            int got = decompressed(decompress_fn, zstd_fn, codec, args[0], &source_view,
                                   (Py_ssize_t)position + RECORD_BATCH_OVERHEAD, n, &piece);
            if (got < 0)
                goto done;
            if (got == 0)
                break;  /* the per-batch walk raises the codec's error */
            n = PyBytes_GET_SIZE(piece);
            body = (const uint8_t *)PyBytes_AS_STRING(piece);
            at = (int64_t)view.len + inflated_size;
        }
        if (check_count(count, n) < 0) {
            Py_CLEAR(piece);
            break;
        }
        for (int k = 0; k < N_WR_COLUMNS; k++)
            if (grow(&columns[k], (Py_ssize_t)count * 8) < 0) {
                Py_XDECREF(piece);
                goto done;
            }
        if (grow(&value_null, count) < 0 || grow(&batches, N_W_FIELDS * 8) < 0) {
            Py_XDECREF(piece);
            goto done;
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
        if (walk_records(body, n, base_offset, count, &c, &err) < 0) {
            Py_CLEAR(piece);
            break;  /* nothing of this batch kept; the per-batch walk reports it */
        }
        if (piece != NULL) {
            int appended = PyList_Append(inflated, piece);
            Py_CLEAR(piece);
            if (appended < 0)
                goto done;
            inflated_size += n;
        }
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
    result = Py_BuildValue("(Ly#y#y#y#y#y#y#y#O)", (long long)position,
                           batches.data ? batches.data : "", batches.size,
#define COL(k) columns[k].data ? columns[k].data : "", columns[k].size
                           COL(WR_OFFSETS), COL(WR_TIMESTAMPS), COL(WR_KEY_STARTS),
                           COL(WR_KEY_ENDS), COL(WR_BODY_STARTS), COL(WR_RECORD_ENDS),
#undef COL
                           value_null.data ? value_null.data : "", value_null.size, inflated);
done:
    PyMem_Free(batches.data);
    PyMem_Free(value_null.data);
    Py_XDECREF(inflated);
    Py_XDECREF(source_view);
    for (int k = 0; k < N_WR_COLUMNS; k++)
        PyMem_Free(columns[k].data);
    PyBuffer_Release(&prot);
    PyBuffer_Release(&view);
    return result;
}

static inline void
put_be(uint8_t *p, uint64_t value, int size)
{
    for (int k = size - 1; k >= 0; k--) {
        p[k] = (uint8_t)value;
        value >>= 8;
    }
}

/* Outcomes of emit_window, one per input batch (records.filter.Outcome). */
enum { E_DROPPED, E_COPIED, E_REBUILT };
enum { E_OUTCOME, E_SIZE, E_LAST_OFFSET, E_MAX_TIMESTAMP, E_KEPT, N_E_FIELDS };

/* A scanned window's record columns, and where their positions point (scan_window_records):
 * buf, or for a compressed batch's records its item of `inflated`, `piece`, which starts at
 * position piece_start (len(buf) plus the items before it). */
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

/* Point x at the next item of `inflated` (a compressed batch's records): 0, or -1 where there is
 * none or it is not bytes. */
static int
next_piece(Window *x, PyObject *inflated, Py_ssize_t *item)
{
    PyObject *piece;
    if (*item >= PyList_GET_SIZE(inflated))
        return -1;
    piece = PyList_GET_ITEM(inflated, *item);
    if (!PyBytes_Check(piece))
        return -1;
    if (*item > 0)
        x->piece_start += x->piece_len;
    x->piece = (const uint8_t *)PyBytes_AS_STRING(piece);
    x->piece_len = PyBytes_GET_SIZE(piece);
    (*item)++;
    return 0;
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

/* A compressed batch's rebuilt records, `raw` bytes long, through compress(codec, records) (the
 * reference's records.compression.compress): a new bytes object, or NULL with *declined set where
 * compress raised an ordinary error (the reference then raises it), or a Python error set. */
static PyObject *
compressed_records(PyObject *compress_fn, int codec, const Window *x, Py_ssize_t r0,
                   int64_t count, int64_t base_offset, int64_t base_ts, Py_ssize_t raw,
                   int *declined)
{
    PyObject *records = PyBytes_FromStringAndSize(NULL, raw), *code, *value, *call[2];
    if (records == NULL)
        return NULL;
    write_kept(x, (uint8_t *)PyBytes_AS_STRING(records), r0, count, base_offset, base_ts);
    code = PyLong_FromLong(codec);
    if (code == NULL) {
        Py_DECREF(records);
        return NULL;
    }
    call[0] = code;
    call[1] = records;
    value = PyObject_Vectorcall(compress_fn, call, 2, NULL);
    Py_DECREF(code);
    Py_DECREF(records);
    if (value == NULL) {
        if (PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_MemoryError))
            *declined = 1;
        return NULL;
    }
    if (!PyBytes_Check(value)) {
        Py_DECREF(value);
        *declined = 1;
        return NULL;
    }
    return value;
}

PyDoc_STRVAR(emit_window_doc,
"emit_window(buf, batches, offsets, timestamps, body_starts, record_ends, value_null, kept,\n"
"            new_horizon, crc, inflated, compress) -> (output bytes, per batch (outcome, size,\n"
"            last offset, max timestamp, records kept) as native int64)\n\n"
"records.filter.filter_v2_batch over a run of scan_window_records, all DELETE_EMPTY: per batch,\n"
"nothing kept: dropped (outcome 0); all kept and no horizon to set: its bytes (1); else rebuilt\n"
"(2) with the horizon policy.output_delete_horizon gives (new_horizon, negative for none, when a\n"
"kept record is a tombstone and the batch has none), a compressed batch's records compressed again\n"
"with its codec by compress (records.compression.compress, called as (codec, records)). kept: one\n"
"byte a record; inflated: the run's list of decompressed record sections. Raises ScanError(-1)\n"
"where the reference would fail or the arguments do not match.");

static PyObject *
emit_window(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    enum { N_VIEWS = 8 };
    Py_buffer views[N_VIEWS];
    int held = 0, declined = 0;
    int64_t new_horizon;
    Py_ssize_t n_batches = 0, n_records, total = 0;
    const int64_t *info;
    Window x;
    Py_ssize_t item = 0;
    PyObject *out = NULL, *table = NULL, *result = NULL, *crc_fn, *compress_fn, *inflated;
    PyObject **payloads = NULL;
    int64_t *row;
    uint8_t *w;
    if (check_nargs("emit_window", nargs, 12) < 0)
        return NULL;
    crc_fn = args[9];
    inflated = args[10];
    compress_fn = args[11] == Py_None ? NULL : args[11];
    if (as_int64(args[8], &new_horizon) < 0 || !PyCallable_Check(crc_fn)
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
    table = PyBytes_FromStringAndSize(NULL, n_batches * N_E_FIELDS * 8);
    payloads = PyMem_Calloc(n_batches > 0 ? (size_t)n_batches : 1, sizeof(PyObject *));
    if (table == NULL || payloads == NULL) {
        if (payloads == NULL)
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
        if (count <= 0 || r0 + count > n_records || bi[W_POSITION] < 0
            || bi[W_SIZE] < RECORD_BATCH_OVERHEAD || bi[W_POSITION] + bi[W_SIZE] > x.buf_len
            || codec > MAX_CODEC || (codec != 0 && (compress_fn == NULL
                                                    || next_piece(&x, inflated, &item) < 0)))
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
                payloads[b] = compressed_records(compress_fn, codec, &x, r0, count,
                                                 bi[W_BASE_OFFSET], base_ts,
                                                 bytes - RECORD_BATCH_OVERHEAD, &declined);
                if (payloads[b] == NULL)
                    goto failed;
                bytes = RECORD_BATCH_OVERHEAD + PyBytes_GET_SIZE(payloads[b]);
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
    if (item != PyList_GET_SIZE(inflated))
        goto declined;
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        goto done;
    w = (uint8_t *)PyBytes_AS_STRING(out);
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
            uint32_t crc;
            for (Py_ssize_t i = r0; i < r0 + count; i++) {
                any_tomb |= x.kept[i] && x.nul[i];
                if (first_kept < 0 && x.kept[i])
                    first_kept = i;
            }
            horizon = any_tomb && !has_h ? new_horizon : (has_h ? bi[W_BASE_TIMESTAMP] : -1);
            base_ts = horizon >= 0 ? horizon : x.ts[first_kept];
            if (payloads[b] != NULL)
                memcpy(w + RECORD_BATCH_OVERHEAD, PyBytes_AS_STRING(payloads[b]),
                       (size_t)PyBytes_GET_SIZE(payloads[b]));
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
            if (crc_of(crc_fn, w + 21, (Py_ssize_t)e[E_SIZE] - 21, &crc) < 0)
                goto done;
            put_be(w + 17, crc, 4);
        }
        w += e[E_SIZE];
        r0 += count;
    }
    result = PyTuple_Pack(2, out, table);
    goto done;
failed:
    if (!declined)
        goto done;
declined:
    PyErr_Clear();
    scan_error(DECLINED);
done:
    for (int v = 0; v < held; v++)
        PyBuffer_Release(&views[v]);
    if (payloads != NULL) {
        for (Py_ssize_t b = 0; b < n_batches; b++)
            Py_XDECREF(payloads[b]);
        PyMem_Free(payloads);
    }
    Py_XDECREF(out);
    Py_XDECREF(table);
    return result;
}

/* ---- batch_headers: the facts of a log of plain batches ------------------------------------ */

PyDoc_STRVAR(batch_headers_doc,
"batch_headers(buf, crc) -> (position, rows bytes)\n\n"
"From position 0, while each batch is one decode_batch takes (v2, sizes inside the data) and not a\n"
"control batch: per batch (position, base offset, last offset, max timestamp, 1 if its CRC-32C\n"
"(crc: records.crc.crc32c) matches else 0) as native int64. Returns where it stopped.");

/* The walk batch_headers and batch_producers share: from position 0, while each batch is one
 * decode_batch takes and has none of the attribute bits `refused`, a row of five native int64 a batch:
 * position, base offset, last offset, max timestamp, then whether its CRC-32C matches (crc_fn given)
 * or else its producer id. Returns (where it stopped, rows), or NULL with an error set. */
static PyObject *
header_rows(const Py_buffer *view, int refused, PyObject *crc_fn)
{
    Grow rows = {0};
    Py_ssize_t position = 0;
    PyObject *result = NULL;
    const uint8_t *d = (const uint8_t *)view->buf;
    while (position < view->len) {
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
        if (crc_fn != NULL) {
            uint32_t crc;
            if (crc_of(crc_fn, h + 21, size - 21, &crc) < 0)
                goto done;
            last_column = crc == (uint32_t)be(h + 17, 4);
        }
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
    if (check_nargs("batch_headers", nargs, 2) < 0)
        return NULL;
    if (!PyCallable_Check(args[1]) || get_bytes(args[0], &view) < 0)
        return scan_error(DECLINED);
    result = header_rows(&view, 0x20, args[1]);  /* not control */
    PyBuffer_Release(&view);
    return result;
}

/* ---- batch_producers: the producer facts of a log of plain data batches -------------------- */

PyDoc_STRVAR(batch_producers_doc,
"batch_producers(buf) -> (position, rows bytes)\n\n"
"From position 0, while each batch is one decode_batch takes (v2, sizes inside the data) and\n"
"neither a control nor a transactional batch: per batch (position, base offset, last offset, max\n"
"timestamp, producer id) as native int64. No CRC is computed. Returns where it stopped.");

static PyObject *
batch_producers(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    PyObject *result;
    if (check_nargs("batch_producers", nargs, 1) < 0)
        return NULL;
    if (get_bytes(args[0], &view) < 0)
        return scan_error(DECLINED);
    result = header_rows(&view, 0x30, NULL);  /* neither transactional nor control */
    PyBuffer_Release(&view);
    return result;
}

/* ---- module ----------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"scan_keys", (PyCFunction)(void (*)(void))scan_keys, METH_FASTCALL, scan_keys_doc},
    {"scan_key_digests", (PyCFunction)(void (*)(void))scan_key_digests, METH_FASTCALL,
     scan_key_digests_doc},
    {"scan_records", (PyCFunction)(void (*)(void))scan_records, METH_FASTCALL,
     scan_records_doc},
    {"rebuild_records", (PyCFunction)(void (*)(void))rebuild_records, METH_FASTCALL,
     rebuild_records_doc},
    {"decode_batch", (PyCFunction)(void (*)(void))decode_batch, METH_FASTCALL, decode_batch_doc},
    {"flush_puts", (PyCFunction)(void (*)(void))flush_puts, METH_FASTCALL, flush_puts_doc},
    {"fold_into_run", (PyCFunction)(void (*)(void))fold_into_run, METH_FASTCALL, fold_into_run_doc},
    {"merge_runs_step", (PyCFunction)(void (*)(void))merge_runs_step, METH_FASTCALL, merge_runs_step_doc},
    {"scan_window_key_digests", (PyCFunction)(void (*)(void))scan_window_key_digests,
     METH_FASTCALL, scan_window_key_digests_doc},
    {"scan_window_records", (PyCFunction)(void (*)(void))scan_window_records, METH_FASTCALL,
     scan_window_records_doc},
    {"emit_window", (PyCFunction)(void (*)(void))emit_window, METH_FASTCALL, emit_window_doc},
    {"batch_headers", (PyCFunction)(void (*)(void))batch_headers, METH_FASTCALL,
     batch_headers_doc},
    {"batch_producers", (PyCFunction)(void (*)(void))batch_producers, METH_FASTCALL,
     batch_producers_doc},
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
    PyObject *module, *array_module;
    array_module = PyImport_ImportModule("array");
    if (array_module == NULL)
        return NULL;
    array_type = PyObject_GetAttrString(array_module, "array");
    Py_DECREF(array_module);
    typecode_q = PyUnicode_FromString("q");
    ScanError = PyErr_NewException("kcompact.records.scan._accel.ScanError", PyExc_Exception, NULL);
    module = array_type && typecode_q && ScanError ? PyModule_Create(&module_def) : NULL;
    if (module == NULL || PyModule_AddObjectRef(module, "ScanError", ScanError) < 0) {
        Py_XDECREF(module);
        return NULL;
    }
    return module;
}
