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
 * It stops (and returns where) before an entry that starts at or past `limit`, once `max_entries`
 * are taken, and before any entry that legacy.decode_legacy_entry or batch.iter_batches would
 * refuse or treat otherwise: fewer than 17 bytes left, a magic other than 0/1, a size below the
 * minimum or past the buffer, key/value lengths that do not fill the size exactly. With
 * LEGACY_CRC it also stops before an entry whose CRC fails; without LEGACY_COMPRESSED, before a
 * compressed wrapper. It never raises on data: the caller's Python walk takes the entry it stopped
 * at and reports what is wrong with it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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

static uint32_t crc_table[8][256];
static int crc_ready;

/* CRC-32 (IEEE 802.3, reflected, zlib's crc32) by eight tables of 256 (slicing-by-8). */
static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = crc_table[0][crc_table[t - 1][i] & 0xFF] ^ (crc_table[t - 1][i] >> 8);
    crc_ready = 1;
}

static uint32_t
crc32_ieee(const uint8_t *p, Py_ssize_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16
                           | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16
                      | (uint32_t)p[7] << 24;
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF]
            ^ crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24]
            ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF]
            ^ crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
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

/* An exact int in the int64 range; 0 on success, -1 (no exception) otherwise. */
static int
legacy_int64(PyObject *obj, int64_t *out)
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
        && crc32_ieee(d + p + 16, end - p - 16) != (uint32_t)be32(d + p + 12))
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
    if (legacy_int64(args[1], &position) < 0 || legacy_int64(args[2], &limit) < 0
        || legacy_int64(args[3], &max_entries) < 0 || legacy_int64(args[4], &flags) < 0
        || position < 0 || max_entries < 0) {
        return accel_declined();
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return accel_declined();
    }
    if (view.ndim != 1 || view.itemsize != 1) {
        PyBuffer_Release(&view);
        return accel_declined();
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
