/*
 * The legacy (magic 0/1) entry walk of kcompact.records.scan._accel, in a file of its own.
 *
 * Why: a log of legacy entries holds one message per entry (or one compressed wrapper per entry),
 * so every walk the cleaner makes over it - loading the log state, the roll's indexes, pass 1's
 * keys, pass 2's decisions - would otherwise build one LegacyEntry per message in Python (~5 us
 * each). legacy_entries reads a run of consecutive entries into one row of int64 columns each (and,
 * when asked, the XXH3-128 digest of each key, as scan_key_digests hashes v2 keys), stopping before
 * the first entry it does not take. Its pure-Python reference is legacy_entries_reference in
 * kcompact/records/scan/legacy_rows.py, which tests hold it to.
 *
 * Entry layout (big-endian; kcompact/records/legacy.py has it in full):
 *
 *     0   int64   offset
 *     8   int32   size          bytes after this field
 *     12  uint32  crc           CRC-32 (IEEE, zlib's) of magic .. end
 *     16  int8    magic         0 or 1
 *     17  int8    attributes    bits 0-2 codec
 *     18  int64   timestamp     v1 only
 *     ..  int32   key length    < 0: null key, then the key
 *     ..  int32   value length  < 0: null value, then the value
 *
 * legacy_emit writes kept plain messages as the v2 batches of one record records.filter writes for them.
 *
 * Checksums: both kernels compute theirs here (CRC-32 of a message, CRC-32C of a batch, by tables) rather
 * than through records.crc as the round's window kernels (cleaner/round/_windows.c) do: a legacy message is ~140 bytes, and a Python
 * call per message would cost as much as the whole walk. The hypothesis tests hold both to records.crc
 * (tests/records/scan/test_legacy_rows.py: a flipped CRC stops a run as crc_valid() says; the batches
 * written are encode_batch's, byte for byte).
 *
 * It stops (and returns where) before an entry that starts at or past `limit`, once `max_entries`
 * are taken, and before any entry that legacy.decode_legacy_entry or batch.iter_batches would
 * refuse or treat otherwise: fewer than 17 bytes left, a magic other than 0/1, a size below the
 * minimum or past the buffer, key/value lengths that do not fill the size exactly. With
 * LEGACY_CRC it also stops before an entry whose CRC fails; without LEGACY_COMPRESSED, before a
 * compressed wrapper. It never raises on data: the caller's Python walk takes the entry it stopped
 * at and reports what is wrong with it.
 */
#include "common.h"

#define XXH_INLINE_ALL
#include "xxhash.h"

#include "_legacy.h"

#define LEGACY_DIGESTS 1     /* flag: the key digests too */
#define LEGACY_CRC 2         /* flag: stop before an entry whose CRC fails */
#define LEGACY_COMPRESSED 4  /* flag: take compressed wrappers (else stop before them) */
#define ROW_FIELDS 10
#define PREFIX 17            /* offset, size, crc, magic: what the framing walk needs */
#define OVERHEAD_V0 14
#define OVERHEAD_V1 22

#define POLY_CRC32 0xEDB88320u   /* IEEE 802.3, reflected: legacy messages (zlib's crc32) */
#define POLY_CRC32C 0x82F63B78u  /* Castagnoli, reflected: v2 batches */

static uint32_t crc32_tables[8][256], crc32c_tables[8][256];
static int crc_ready;

/* Eight tables of 256 for the reflected polynomial `poly` (slicing-by-8). */
static void
crc_tables(uint32_t table[8][256], uint32_t poly)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? poly ^ (c >> 1) : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = table[0][table[t - 1][i] & 0xFF] ^ (table[t - 1][i] >> 8);
}

static void
crc_init(void)
{
    crc_tables(crc32_tables, POLY_CRC32);
    crc_tables(crc32c_tables, POLY_CRC32C);
    crc_ready = 1;
}

/* The reflected CRC of p[0..n) by `table` (CRC-32 or CRC-32C: initial and final value all ones). */
static uint32_t
crc_sliced(uint32_t table[8][256], const uint8_t *p, Py_ssize_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16
                           | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16
                      | (uint32_t)p[7] << 24;
        c = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF]
            ^ table[4][lo >> 24] ^ table[3][hi & 0xFF] ^ table[2][(hi >> 8) & 0xFF]
            ^ table[1][(hi >> 16) & 0xFF] ^ table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static uint64_t
be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static int32_t
be32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

/* The sized field (key or value) at `cursor` of the entry [start, end): -1 where decode_legacy_entry
 * raises; else 0 with *from / *to set (-1 both for null) and *cursor moved past it. `room` is
 * where the field may end at most. */
static int
sized_field(const uint8_t *d, Py_ssize_t room, Py_ssize_t *cursor, int64_t *from, int64_t *to)
{
    int32_t length = be32(d + *cursor);
    *cursor += 4;
    if (length < 0) {
        *from = *to = -1;
        return 0;
    }
    if (length > room - *cursor)
        return -1;
    *from = *cursor;
    *cursor += length;
    *to = *cursor;
    return 0;
}

/* One entry at p into row (and digest); 0 taken, -1 stop before it. */
static int
take_entry(const uint8_t *d, Py_ssize_t n, Py_ssize_t p, int flags, int64_t *row, uint8_t *digest)
{
    int64_t size = be32(d + p + 8);
    int magic = (int8_t)d[p + 16];
    Py_ssize_t end, cursor;
    if ((magic != 0 && magic != 1) || size < (magic ? OVERHEAD_V1 : OVERHEAD_V0)
        || size > (int64_t)(n - p - 12))
        return -1;
    end = p + 12 + (Py_ssize_t)size;
    if (!(flags & LEGACY_COMPRESSED) && (d[p + 17] & 0x07) != 0)
        return -1;
    row[0] = p;
    row[1] = (int64_t)be64(d + p);
    row[2] = 12 + size;
    row[3] = magic;
    row[4] = d[p + 17];
    row[5] = magic ? (int64_t)be64(d + p + 18) : -1;
    cursor = p + 18 + (magic ? 8 : 0);
    if (sized_field(d, end - 4, &cursor, &row[6], &row[7]) < 0
        || sized_field(d, end, &cursor, &row[8], &row[9]) < 0 || cursor != end)
        return -1;
    if ((flags & LEGACY_CRC)
        && crc_sliced(crc32_tables, d + p + 16, end - p - 16) != (uint32_t)be32(d + p + 12))
        return -1;
    if (flags & LEGACY_DIGESTS) {
        if (row[6] >= 0) {
            XXH128_canonical_t canonical;
            XXH128_canonicalFromHash(&canonical,
                                     XXH3_128bits(d + row[6], (size_t)(row[7] - row[6])));
            memcpy(digest, canonical.digest, 16);
        }
        else
            memset(digest, 0, 16);
    }
    return 0;
}

const char legacy_entries_doc[] =
    "legacy_entries(buf, position, limit, max_entries, flags) -> (reached, rows, digests)\n\n"
    "Walk the legacy entries of buf from position (see _legacy.c). rows: per entry taken, ten\n"
    "native int64 (position, offset, size_in_bytes, magic, attributes, timestamp, key start,\n"
    "key end, value start, value end; -1 start and end for null); digests: 16 bytes an entry\n"
    "(zeros for a null key) with flags & 1, else empty. flags & 2: stop before a bad CRC;\n"
    "flags & 4: take compressed wrappers. Declined arguments: ScanError(-1).";

PyObject *
legacy_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    int64_t position, limit, max_entries, flags;
    PyObject *rows = NULL, *digests = NULL, *result = NULL;
    (void)self;
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "legacy_entries() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    if (as_int64(args[1], &position) < 0 || as_int64(args[2], &limit) < 0
        || as_int64(args[3], &max_entries) < 0 || as_int64(args[4], &flags) < 0
        || position < 0 || max_entries < 0) {
        return scan_error(DECLINED);
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return scan_error(DECLINED);
    }
    if (view.ndim != 1 || view.itemsize != 1) {
        PyBuffer_Release(&view);
        return scan_error(DECLINED);
    }
    if (!crc_ready)
        crc_init();
    {
        const uint8_t *d = (const uint8_t *)view.buf;
        Py_ssize_t n = view.len, p = (Py_ssize_t)position, taken = 0, capacity = 256;
        int64_t *row_data = PyMem_Malloc(sizeof(int64_t) * ROW_FIELDS * capacity);
        uint8_t *digest_data = PyMem_Malloc(16 * capacity);
        if (row_data == NULL || digest_data == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        while (p < limit && p <= n - PREFIX && taken < max_entries) {
            if (taken == capacity) {
                int64_t *more_rows;
                uint8_t *more_digests;
                capacity *= 2;
                more_rows = PyMem_Realloc(row_data, sizeof(int64_t) * ROW_FIELDS * capacity);
                if (more_rows == NULL) {
                    PyErr_NoMemory();
                    goto fail;
                }
                row_data = more_rows;
                more_digests = PyMem_Realloc(digest_data, 16 * capacity);
                if (more_digests == NULL) {
                    PyErr_NoMemory();
                    goto fail;
                }
                digest_data = more_digests;
            }
            if (take_entry(d, n, p, (int)flags, row_data + ROW_FIELDS * taken,
                           digest_data + 16 * taken) < 0)
                break;
            p += (Py_ssize_t)row_data[ROW_FIELDS * taken + 2];
            taken++;
        }
        rows = PyBytes_FromStringAndSize((const char *)row_data,
                                         (Py_ssize_t)sizeof(int64_t) * ROW_FIELDS * taken);
        digests = PyBytes_FromStringAndSize((const char *)digest_data,
                                            flags & LEGACY_DIGESTS ? 16 * taken : 0);
        if (rows != NULL && digests != NULL)
            result = Py_BuildValue("(nOO)", p, rows, digests);
    fail:
        PyMem_Free(row_data);
        PyMem_Free(digest_data);
    }
    Py_XDECREF(rows);
    Py_XDECREF(digests);
    PyBuffer_Release(&view);
    return result;
}

/* ---- legacy_emit: kept messages as v2 batches of one record ---------------------------------- */

#define V2_HEADER 61
#define V2_TIMESTAMP_TYPE 0x08
#define V2_DELETE_HORIZON 0x40
#define V2_RECORD_ROOM 12  /* a record's fixed part: attributes, timestamp delta (<= 10), offset delta */
#define V2_EXTRA 40        /* a batch's bytes beyond its header, key and value: varints and the fixed part */

static void
put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static void
put_be32(uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

/* Varints: put_unsigned, unsigned_size and zigzag64 are common.h's. */
static uint64_t
zigzag32(int32_t v)
{
    return (uint32_t)(((uint32_t)v << 1) ^ (uint32_t)(v >> 31));
}

/* The sized field (key or value) of a record at p: its zig-zag length (-1 for null), then its bytes. */
static uint8_t *
put_sized(uint8_t *p, const uint8_t *d, int64_t from, int64_t to)
{
    if (from < 0)
        return put_unsigned(p, zigzag32(-1));
    p = put_unsigned(p, zigzag32((int32_t)(to - from)));
    memcpy(p, d + from, (size_t)(to - from));
    return p + (to - from);
}

/* One kept message (its row) as the v2 batch records.filter.filter_legacy_entry writes for it, at out;
 * returns the batch's size. `out` has room for V2_HEADER + 30 + key + value bytes. */
static Py_ssize_t
emit_one(const uint8_t *d, const int64_t *row, int64_t horizon, uint8_t *out)
{
    int64_t ts = row[5];
    int log_append = row[3] == 1 && (row[4] & 0x08);
    int with_horizon = row[8] < 0 && horizon >= 0;  /* a tombstone kept: the round's horizon */
    int64_t base_ts = with_horizon ? horizon : ts;
    uint8_t record[V2_RECORD_ROOM], *p = record, *q;
    Py_ssize_t n;
    *p++ = 0;  /* record attributes */
    p = put_unsigned(p, zigzag64((int64_t)((uint64_t)ts - (uint64_t)base_ts)));
    *p++ = 0;  /* offset delta */
    q = out + V2_HEADER;
    {  /* the record: its length, the head above, key, value, no headers */
        int64_t key = row[6] < 0 ? 0 : row[7] - row[6], value = row[8] < 0 ? 0 : row[9] - row[8];
        int64_t length = (p - record) + key + value + 1
                         + unsigned_size(zigzag32(row[6] < 0 ? -1 : (int32_t)key))
                         + unsigned_size(zigzag32(row[8] < 0 ? -1 : (int32_t)value));
        q = put_unsigned(q, zigzag32((int32_t)length));
    }
    memcpy(q, record, (size_t)(p - record));
    q += p - record;
    q = put_sized(q, d, row[6], row[7]);
    q = put_sized(q, d, row[8], row[9]);
    *q++ = 0;  /* headers count */
    n = q - out;
    put_be64(out, (uint64_t)row[1]);                           /* base offset */
    put_be32(out + 8, (uint32_t)(n - 12));                     /* batch length */
    put_be32(out + 12, 0xFFFFFFFFu);                           /* partition leader epoch -1 */
    out[16] = 2;                                               /* magic */
    out[21] = 0;                                               /* attributes, high byte */
    out[22] = (uint8_t)((log_append ? V2_TIMESTAMP_TYPE : 0) | (with_horizon ? V2_DELETE_HORIZON : 0));
    put_be32(out + 23, 0);                                     /* last offset delta */
    put_be64(out + 27, (uint64_t)base_ts);                     /* base timestamp */
    put_be64(out + 35, (uint64_t)(log_append || ts >= -1 ? ts : -1));  /* max timestamp */
    put_be64(out + 43, UINT64_MAX);                            /* producer id -1 */
    out[51] = out[52] = 0xFF;                                  /* producer epoch -1 */
    put_be32(out + 53, 0xFFFFFFFFu);                           /* base sequence -1 */
    put_be32(out + 57, 1);                                     /* records */
    put_be32(out + 17, crc_sliced(crc32c_tables, out + 21, n - 21));
    return n;
}

const char legacy_emit_doc[] =
    "legacy_emit(buf, rows, horizon) -> (batches, sizes)\n\n"
    "Each kept message (rows: legacy_entries' rows of plain messages of buf) as the v2 batch of one\n"
    "record records.filter.filter_legacy_entry writes for it, a tombstone with the delete horizon\n"
    "`horizon` when it is not negative; the batches back to back, and their sizes as native int64.\n"
    "Declined arguments (a compressed row, a row outside buf): ScanError(-1).";

PyObject *
legacy_emit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view, rows_view;
    int64_t horizon;
    PyObject *data = NULL, *sizes = NULL, *result = NULL;
    Py_ssize_t count, total = 0, at = 0;
    (void)self;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "legacy_emit() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    if (as_int64(args[2], &horizon) < 0)
        return scan_error(DECLINED);
    if (PyObject_GetBuffer(args[0], &view, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return scan_error(DECLINED);
    }
    if (PyObject_GetBuffer(args[1], &rows_view, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        PyBuffer_Release(&view);
        return scan_error(DECLINED);
    }
    if (!crc_ready)
        crc_init();
    count = rows_view.len / (Py_ssize_t)(sizeof(int64_t) * ROW_FIELDS);
    if (rows_view.len % (Py_ssize_t)(sizeof(int64_t) * ROW_FIELDS) != 0) {
        PyBuffer_Release(&rows_view);
        PyBuffer_Release(&view);
        return scan_error(DECLINED);
    }
    {
        const int64_t *rows = (const int64_t *)rows_view.buf;
        for (Py_ssize_t i = 0; i < count; i++) {
            const int64_t *row = rows + ROW_FIELDS * i;
            int64_t key = row[6] < 0 ? 0 : row[7] - row[6];
            int64_t value = row[8] < 0 ? 0 : row[9] - row[8];
            if ((row[4] & 0x07) != 0 || (row[3] != 0 && row[3] != 1)
                || row[0] < 0 || row[0] + row[2] > view.len || key < 0 || value < 0
                || row[7] > row[0] + row[2] || row[9] > row[0] + row[2]
                || (row[6] >= 0 && row[6] < row[0]) || (row[8] >= 0 && row[8] < row[0])) {
                PyBuffer_Release(&rows_view);
                PyBuffer_Release(&view);
                return scan_error(DECLINED);
            }
            total += V2_HEADER + V2_EXTRA + key + value;
        }
    }
    data = PyBytes_FromStringAndSize(NULL, total);
    sizes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizeof(int64_t) * count);
    if (data != NULL && sizes != NULL) {
        uint8_t *out = (uint8_t *)PyBytes_AS_STRING(data);
        int64_t *size_out = (int64_t *)PyBytes_AS_STRING(sizes);
        const int64_t *rows = (const int64_t *)rows_view.buf;
        for (Py_ssize_t i = 0; i < count; i++) {
            size_out[i] = emit_one((const uint8_t *)view.buf, rows + ROW_FIELDS * i, horizon,
                                   out + at);
            at += (Py_ssize_t)size_out[i];
        }
        if (_PyBytes_Resize(&data, at) == 0)
            result = Py_BuildValue("(OO)", data, sizes);
    }
    Py_XDECREF(data);
    Py_XDECREF(sizes);
    PyBuffer_Release(&rows_view);
    PyBuffer_Release(&view);
    return result;
}
