/*
 * kcompact/records/scan/walk.h -- the v2 record walks, shared by the scan's kernels (_accel.c) and
 * the round's windows (cleaner/round/_windows.c), which walk the same records a run of batches at a
 * time. The record layout and the error positions are in _accel.c's header comment.
 *
 * Static inline, as common.h: each module compiles its own copy.
 */
#ifndef KCOMPACT_RECORDS_SCAN_WALK_H
#define KCOMPACT_RECORDS_SCAN_WALK_H

#include "common.h"

/* XXH3-128, the offset map's key digest (cleaner/offset_map: key_digests), compiled in whole from the
 * vendored single-header xxHash (kcompact/_vendor/xxhash: BSD 2-Clause, its licence at the top of xxhash.h). */
#define XXH_INLINE_ALL
#include "xxhash.h"

#define MIN_RECORD_BODY 6  /* attributes + five 1-byte varints */
#define MIN_RECORD_SIZE 7  /* the length varint + the smallest body */

/* ---- the v2 batch header ----------------------------------------------------------------- */

/* The v2 batch header (Kafka's DefaultRecordBatch), big-endian:
 *   0 base_offset int64   8 batch_length int32   12 partition_leader_epoch int32   16 magic int8
 *  17 crc uint32         21 attributes int16     23 last_offset_delta int32
 *  27 base_timestamp int64   35 max_timestamp int64   43 producer_id int64
 *  51 producer_epoch int16   53 base_sequence int32   57 records_count int32   61 records */
#define RECORD_BATCH_OVERHEAD 61
#define LOG_OVERHEAD 12
#define MIN_BATCH_LENGTH 49

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

/* ---- scan_key_digests ------------------------------------------------------------------- */

/* scan_keys' walk, keeping only keyed records at or above min_offset: their offsets and the
 * canonical (big-endian) XXH3-128 digests of their keys. Returns how many it kept, or -1 with
 * *err set (corrupt). `offsets` and `digests` have room for `count` entries. */
static inline Py_ssize_t
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

/* ---- scan_records ----------------------------------------------------------------------- */

enum { OFFSETS, TIMESTAMPS, KEY_STARTS, KEY_ENDS, RECORD_STARTS, BODY_STARTS, RECORD_ENDS,
       N_COLUMNS };

typedef struct {
    int64_t *column[N_COLUMNS];
    char *value_null;
    int log_append;          /* every timestamp is `timestamp` */
    int64_t timestamp;       /* the LogAppendTime, or base_timestamp */
} Columns;

static inline int
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

#endif
