/*
 * kcompact.log.offset_map._runs -- the offset map's compiled kernels: the flush of its pending
 * puts into a sorted run (flush_puts), the flush of keys a run already holds (fold_into_run), and
 * one step of merging two runs (merge_runs_step).
 *
 * Why here: these kernels know the offset map's data structure (its packed runs: key columns, the
 * bucket starts, the implied top bits), so they sit beside its Python code
 * (kcompact/log/offset_map/__init__.py and runs.py, which hold the numpy references and the
 * layout) and are imported only through kcompact/log/offset_map/accel.py. The contract (a result
 * exactly the reference's, or ScanError and the reference runs) is common.h's.
 */
#include "common.h"

PyObject *kcompact_scan_error;  /* kcompact.log.offset_map._runs.ScanError (common.h) */

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
"flush_puts(chunks, implied_bits, part=0, parts=1) -> (hi, key, mid, low, offsets): bytes\n\n"
"offset_map's flush: `chunks` is a list of (hi, lo, offsets) tuples (uint64, uint64, int64\n"
"arrays of one length), the puts in order. For each distinct key (hi and the top\n"
"implied_bits + 24 bits of lo), in ascending order, its last put: hi (native uint64), the\n"
"run's key (hi << implied_bits | lo >> (64 - implied_bits), uint64), mid (the next 16 bits of\n"
"lo, uint16), low (the next 8, uint8) and the put's offset (int64).\n"
"With parts (1, 2, 4 or 8), only the keys whose hi's top log2(parts) bits are `part`: the parts'\n"
"results, one after the other in part order, are the whole flush's (each part may run on its own\n"
"thread: the GIL is released while it sorts).\n"
"Raises ScanError(-1) for arguments it does not take (the caller then uses numpy).");

static PyObject *
flush_puts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Chunks c;
    PyObject *cols[5] = {NULL, NULL, NULL, NULL, NULL}, *result = NULL;
    PackedPut *puts = NULL;
    uint32_t *starts = NULL;  /* fewer than 2**LOW_FREE_BITS puts */
    Py_ssize_t *block_chunk = NULL, n, own = 0, groups = 0, buckets, first_bucket, end_bucket;
    uint64_t mask;
    int64_t first_offset = 0, previous = INT64_MIN;
    long s, part = 0, parts = 1;
    int bits = 1, by_offset = 1, part_bits = 0;
    if (nargs != 2 && nargs != 4) {
        PyErr_Format(PyExc_TypeError, "flush_puts expected 2 or 4 arguments, got %zd", nargs);
        return NULL;
    }
    s = PyLong_CheckExact(args[1]) ? PyLong_AsLong(args[1]) : -1;
    if (nargs == 4) {
        part = PyLong_CheckExact(args[2]) ? PyLong_AsLong(args[2]) : -1;
        parts = PyLong_CheckExact(args[3]) ? PyLong_AsLong(args[3]) : -1;
    }
    while (part_bits < 3 && (1L << part_bits) < parts)
        part_bits++;
    if (s < 1 || s + 24 > 64 - LOW_FREE_BITS  /* the compared bits must leave lo's low bits free */
        || parts != (1L << part_bits) || part < 0 || part >= parts) {
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
    if (bits < part_bits)
        bits = part_bits;
    buckets = (Py_ssize_t)1 << bits;
    first_bucket = (Py_ssize_t)part << (bits - part_bits);  /* this part's buckets: [first, end) */
    end_bucket = first_bucket + ((Py_ssize_t)1 << (bits - part_bits));
    starts = PyMem_Calloc((size_t)buckets + 1, sizeof(uint32_t));
    block_chunk = PyMem_Malloc(((size_t)(n >> BLOCK_SHIFT) + 1) * sizeof(Py_ssize_t));
    if (starts == NULL || block_chunk == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* without the GIL from here to the output's objects (cleaner/workers/parallel.py: a round's threads read
     * the next chunks' keys meanwhile); only the buffers acquired above and the memory allocated are read */
    Py_BEGIN_ALLOW_THREADS
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
    /* this part's buckets only, from 0 in `puts` (all of them when parts is 1) */
    for (Py_ssize_t b = 0; b < first_bucket; b++)
        starts[b + 1] = 0;
    for (Py_ssize_t b = first_bucket; b < end_bucket; b++)
        starts[b + 1] += starts[b];
    own = starts[end_bucket];
    Py_END_ALLOW_THREADS
    puts = big_malloc((size_t)own * sizeof(PackedPut));
    if (puts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < c.chunks; k++) {  /* starts[b] ends as bucket b's end */
        const uint64_t *hi = c.views[3 * k].buf, *lo = c.views[3 * k + 1].buf;
        const int64_t *off = c.views[3 * k + 2].buf;
        if (part_bits == 0) {
            for (Py_ssize_t i = 0, m = c.first[k + 1] - c.first[k], at = c.first[k]; i < m; i++) {
                PackedPut *p;
                if (i + PREFETCH_AHEAD < m)  /* the puts' slots are random: ask for them early */
                    __builtin_prefetch(&puts[starts[hi[i + PREFETCH_AHEAD] >> (64 - bits)]], 1);
                p = &puts[starts[hi[i] >> (64 - bits)]++];
                p->hi = hi[i];
                p->lo_at = (lo[i] & mask)
                           | (by_offset ? (uint64_t)off[i] - (uint64_t)first_offset : (uint64_t)(at + i));
            }
            continue;
        }
        for (Py_ssize_t i = 0, m = c.first[k + 1] - c.first[k], at = c.first[k]; i < m; i++) {
            PackedPut *p;
            if ((long)(hi[i] >> (64 - part_bits)) != part)
                continue;
            p = &puts[starts[hi[i] >> (64 - bits)]++];
            p->hi = hi[i];
            p->lo_at = (lo[i] & mask)
                       | (by_offset ? (uint64_t)off[i] - (uint64_t)first_offset : (uint64_t)(at + i));
        }
    }
    for (Py_ssize_t b = first_bucket, begin = 0; b < end_bucket; b++) {
        packed_sort_bucket(puts + begin, starts[b] - begin);
        begin = starts[b];
    }
    for (Py_ssize_t i = 0; i < own; i++)
        groups += i + 1 == own || !packed_same_key(&puts[i], &puts[i + 1]);
    for (Py_ssize_t b = 0, k = 0; b <= (n >> BLOCK_SHIFT); b++) {  /* the chunk of each block's first put */
        while (k + 1 < c.chunks && c.first[k + 1] <= (b << BLOCK_SHIFT))
            k++;
        block_chunk[b] = k;
    }
    Py_END_ALLOW_THREADS
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
        Py_BEGIN_ALLOW_THREADS  /* the new objects are this call's alone until it returns */
        for (Py_ssize_t i = 0, g = 0; i < own; i++) {  /* each key's last put */
            const PackedPut *p = &puts[i];
            uint64_t lo = p->lo_at & ~LOW_MASK;
            if (i + 1 < own && packed_same_key(p, &puts[i + 1]))
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
        Py_END_ALLOW_THREADS
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

/* ---- module ----------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"flush_puts", (PyCFunction)(void (*)(void))flush_puts, METH_FASTCALL, flush_puts_doc},
    {"fold_into_run", (PyCFunction)(void (*)(void))fold_into_run, METH_FASTCALL, fold_into_run_doc},
    {"merge_runs_step", (PyCFunction)(void (*)(void))merge_runs_step, METH_FASTCALL, merge_runs_step_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kcompact.log.offset_map._runs",
    .m_doc = "The offset map's run kernels; see cleaner/offset_map/accel.py.",
    .m_size = -1,  /* module state in statics: ScanError */
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__runs(void)
{
    return kcompact_module(&module_def, "kcompact.log.offset_map._runs.ScanError");
}
