/*
 * kcompact/cleaner/round/_windows_codecs.c -- the round's windows' gzip, snappy and lz4 (part of the
 * kcompact.cleaner.round._windows extension, with _windows.c), and the round's inflated payloads.
 *
 * Why: a small compacted partition's batches hold ~100 records, ~4 KiB compressed, so a Python call per
 * batch (records.compression.decompress and its framing) cost about as much as the codec itself, and each
 * batch was decompressed twice (pass 1 for its keys, pass 2 for its records, as Kafka's Cleaner does in
 * buildOffsetMap and cleanInto). Here:
 *
 * - the usual streams are decompressed in C: gzip through zlib (the very library CPython's zlib module
 *   links), snappy in xerial framing (snappy-java's SnappyOutputStream, raw blocks decoded here) and lz4 in
 *   Kafka's frame (Lz4BlockOutputStream, blocks decoded here). Anything else -- another shape, a stream the
 *   strict decoders below refuse -- is declined and records.compression takes it (and words its error);
 *   a valid stream has one decompression, so what is accepted here is what the Python path returns;
 * - a rebuilt gzip batch's records are compressed with zlib as records.compression.compress does (raw
 *   deflate at level 6 under Kafka's fixed header), one reused deflate state per thread; a snappy or lz4
 *   batch's blocks by its library's own block function (compression.block_compressors: cramjam's raw
 *   snappy, lz4.frame's one-block frame, the very calls compress makes), the framing around them done here;
 * - pass 1 keeps what it decompressed (a copy of the compressed bytes beside their records, up to
 *   the round's budget in all) and pass 2 takes a batch's records from there when its compressed bytes are
 *   the very same (compared whole), so a small partition's batches are decompressed once a round.
 */
#include <pthread.h>
#include <zlib.h>

#include "_windows_codecs.h"
#define XXH_INLINE_ALL
#include "xxhash.h"

#define MAX_OUTPUT ((Py_ssize_t)1 << 31)  /* records.compression.decompress's default max_output */

/* ---- gzip (RFC 1952) through zlib ---------------------------------------------------------- */

static const uint8_t GZIP_HEADER[10] = {0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff};  /* compression.GZIP_HEADER */
#define GZIP_LEVEL 6  /* compression.GZIP_LEVEL */

/* One inflate and one deflate state per thread, reset for each batch (a deflate state at level 6 is
 * ~270 KiB to make; zlib's output does not depend on a reset state's history). */
static __thread z_stream gz_in, gz_out;
static __thread int gz_in_ready, gz_out_ready;

/* compression._gzip_decompress for one member: wbits 16 + MAX_WBITS (header and trailer checked by
 * zlib), the stream to its end; bytes after it that start another member are declined (the Python path
 * reads on), other trailing bytes ignored as there. */
static Py_ssize_t
gzip_into(const uint8_t *p, Py_ssize_t n, Grow *dst)
{
    int r;
    if (n > UINT_MAX)
        return -1;
    if (!gz_in_ready) {
        memset(&gz_in, 0, sizeof gz_in);
        if (inflateInit2(&gz_in, 16 + MAX_WBITS) != Z_OK)
            return -2;
        gz_in_ready = 1;
    }
    else if (inflateReset(&gz_in) != Z_OK)
        return -1;
    gz_in.next_in = (Bytef *)p;
    gz_in.avail_in = (uInt)n;
    dst->size = 0;
    do {
        Py_ssize_t room;
        if (grow_raw(dst, dst->size < 4 * n ? 4 * n + 64 : dst->size) < 0)
            return -2;
        room = dst->capacity - dst->size;
        gz_in.next_out = (Bytef *)dst->data + dst->size;
        gz_in.avail_out = room > UINT_MAX ? UINT_MAX : (uInt)room;
        r = inflate(&gz_in, Z_NO_FLUSH);
        dst->size = (Py_ssize_t)((char *)gz_in.next_out - dst->data);
        if (dst->size > MAX_OUTPUT)
            return -1;
    } while (r == Z_OK && gz_in.avail_out == 0);
    if (r != Z_STREAM_END)
        return -1;  /* corrupt or truncated: the Python path says which */
    if (gz_in.avail_in >= sizeof GZIP_HEADER && memcmp(gz_in.next_in, GZIP_HEADER, 3) == 0)
        return -1;  /* another member follows */
    return dst->size;
}

Py_ssize_t
gzip_native_compress_into(Grow *dst, const uint8_t *p, Py_ssize_t n)
{
    Py_ssize_t capacity, at = dst->size;
    uLong crc;
    uint8_t *w;
    if (n > UINT_MAX / 2)
        return -1;
    if (!gz_out_ready) {
        memset(&gz_out, 0, sizeof gz_out);
        /* zlib.compressobj(GZIP_LEVEL, DEFLATED, -MAX_WBITS): memLevel DEF_MEM_LEVEL (8), default strategy */
        if (deflateInit2(&gz_out, GZIP_LEVEL, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
            return -2;
        gz_out_ready = 1;
    }
    else if (deflateReset(&gz_out) != Z_OK)
        return -1;
    capacity = (Py_ssize_t)deflateBound(&gz_out, (uLong)n) + 64 + (Py_ssize_t)sizeof GZIP_HEADER + 8;
    if (grow_raw(dst, capacity) < 0)
        return -2;
    w = (uint8_t *)dst->data + at;
    memcpy(w, GZIP_HEADER, sizeof GZIP_HEADER);
    gz_out.next_in = (Bytef *)p;
    gz_out.avail_in = (uInt)n;
    gz_out.next_out = w + sizeof GZIP_HEADER;
    gz_out.avail_out = (uInt)(capacity - (Py_ssize_t)sizeof GZIP_HEADER - 8);
    /* as compressobj.compress (Z_NO_FLUSH), then flush() (Z_FINISH) */
    if (deflate(&gz_out, Z_NO_FLUSH) != Z_OK || gz_out.avail_in != 0
        || deflate(&gz_out, Z_FINISH) != Z_STREAM_END)
        return -1;
    w = gz_out.next_out;
    crc = crc32(0L, p, (uInt)n);
    for (int k = 0; k < 4; k++)
        w[k] = (uint8_t)(crc >> (8 * k));
    for (int k = 0; k < 4; k++)
        w[4 + k] = (uint8_t)((uint64_t)n >> (8 * k));
    w += 8;
    dst->size = (Py_ssize_t)((char *)w - dst->data);
    return dst->size - at;
}

const char zlib_runtime_version_doc[] =
    "zlib_version() -> str\n\n"
    "The linked zlib's zlibVersion(): the windows compress gzip themselves only where it is the zlib module's\n"
    "(zlib.ZLIB_RUNTIME_VERSION).";

PyObject *
zlib_runtime_version(PyObject *module, PyObject *unused)
{
    return PyUnicode_FromString(zlibVersion());
}

/* ---- snappy: xerial framing, raw blocks ---------------------------------------------------- */

static const uint8_t XERIAL_MAGIC[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
#define XERIAL_MAX_CHUNK (512 * 1024 * 1024)  /* compression.XERIAL_MAX_CHUNK */
#define SNAPPY_MAX_RATIO 32  /* compression._SNAPPY_MAX_RATIO */

static inline uint32_t
le(const uint8_t *p, int size)
{
    uint32_t v = 0;
    for (int k = size - 1; k >= 0; k--)
        v = v << 8 | p[k];
    return v;
}

/* A raw snappy block's stated length (its varint preamble), or -1; *at: where its tags start. */
static Py_ssize_t
snappy_length(const uint8_t *p, Py_ssize_t n, Py_ssize_t *at)
{
    uint64_t v = 0;
    for (int k = 0; k < 5 && k < n; k++) {
        v |= (uint64_t)(p[k] & 0x7f) << (7 * k);
        if (!(p[k] & 0x80)) {
            *at = k + 1;
            return v > UINT32_MAX ? -1 : (Py_ssize_t)v;
        }
    }
    return -1;
}

/* A match's `len` bytes at w from `off` bytes back (snappy's copy and lz4's match: they may overlap, a byte at
 * a time then, as the formats define). */
static inline void
copy_match(uint8_t *w, Py_ssize_t off, Py_ssize_t len)
{
    if (off >= len)
        memcpy(w, w - off, (size_t)len);
    else
        for (Py_ssize_t k = 0; k < len; k++)
            w[k] = w[k - off];
}

/* One raw snappy block p[0, n) into w[0, length) (its stated length): 0, or -1 where any tag is not
 * well formed (a literal or copy past either end, offset 0 or before the output's start) or the tags do
 * not make exactly `length` bytes. */
static int
snappy_block(const uint8_t *p, Py_ssize_t n, Py_ssize_t at, uint8_t *w, Py_ssize_t length)
{
    Py_ssize_t ip = at, op = 0;
    while (ip < n) {
        uint8_t tag = p[ip++];
        Py_ssize_t len, off;
        if ((tag & 3) == 0) {  /* literal */
            len = tag >> 2;
            if (len >= 60) {
                int extra = (int)len - 59;
                if (n - ip < extra)
                    return -1;
                len = (Py_ssize_t)le(p + ip, extra);
                ip += extra;
            }
            len += 1;
            if (n - ip < len || length - op < len)
                return -1;
            memcpy(w + op, p + ip, (size_t)len);
            ip += len;
            op += len;
            continue;
        }
        if ((tag & 3) == 1) {
            if (n - ip < 1)
                return -1;
            len = ((tag >> 2) & 7) + 4;
            off = (Py_ssize_t)(tag >> 5) << 8 | p[ip];
            ip += 1;
        }
        else {
            int width = (tag & 3) == 2 ? 2 : 4;
            if (n - ip < width)
                return -1;
            len = (tag >> 2) + 1;
            off = (Py_ssize_t)le(p + ip, width);
            ip += width;
        }
        if (off == 0 || off > op || length - op < len)
            return -1;
        copy_match(w + op, off, len);
        op += len;
    }
    return op == length ? 0 : -1;
}

/* compression._snappy_decompress for the xerial stream snappy-java writes: the header (version >= 1),
 * then length-prefixed raw blocks to exactly the end; a concatenated stream, stray trailing bytes or a
 * raw block without framing are declined (the Python path takes them). */
static Py_ssize_t
snappy_into(const uint8_t *p, Py_ssize_t n, Grow *dst)
{
    Py_ssize_t pos = 16;
    dst->size = 0;
    if (n < 16 || memcmp(p, XERIAL_MAGIC, 8) != 0 || (int32_t)be(p + 8, 4) < 1)
        return -1;
    while (pos < n) {
        int32_t chunk;
        Py_ssize_t length, at;
        if (n - pos < 4)
            return -1;
        chunk = (int32_t)be(p + pos, 4);
        pos += 4;
        if (chunk <= 0 || chunk > XERIAL_MAX_CHUNK || n - pos < chunk
            || memcmp(p + pos - 4, XERIAL_MAGIC, 4) == 0)
            return -1;
        length = snappy_length(p + pos, chunk, &at);
        if (length <= 0 || length > (Py_ssize_t)SNAPPY_MAX_RATIO * chunk || dst->size + length > MAX_OUTPUT)
            return -1;
        if (grow_raw(dst, length) < 0)
            return -2;
        if (snappy_block(p + pos, chunk, at, (uint8_t *)dst->data + dst->size, length) < 0)
            return -1;
        dst->size += length;
        pos += chunk;
    }
    return dst->size;
}

/* ---- lz4: Kafka's frame (lz4_framing), blocks decoded here ------------------------------------ */

#define LZ4_MAGIC 0x184D2204u
#define LZ4_STORED 0x80000000u
#define LZ4_MIN_MATCH 4
#define LZ4_LAST_LITERALS 5  /* the format's end rules: the last 5 bytes are literals, */
#define LZ4_MFLIMIT 12      /* and the last match starts at least 12 bytes before the end */

/* A sequence's length past its token's 15: the bytes at p[*ip] added while they are 255, and the one after;
 * -1 where the block ends first. */
static inline Py_ssize_t
lz4_length(const uint8_t *p, Py_ssize_t n, Py_ssize_t *ip, Py_ssize_t len)
{
    uint8_t more;
    do {
        if (*ip >= n)
            return -1;
        more = p[(*ip)++];
        len += more;
    } while (more == 255);
    return len;
}

/* One lz4 block p[0, n) into w[0, capacity): its length, or -1 where it is not well formed or breaks the
 * format's end rules (which liblz4's LZ4_decompress_safe enforces near the end of its output; every
 * block a compressor writes keeps them), so what is accepted is what lz4.block.decompress returns. */
static Py_ssize_t
lz4_block(const uint8_t *p, Py_ssize_t n, uint8_t *w, Py_ssize_t capacity)
{
    Py_ssize_t ip = 0, op = 0, match_start = -1, match_end = -1;
    for (;;) {
        uint8_t token;
        Py_ssize_t len, off;
        if (ip >= n)
            return -1;
        token = p[ip++];
        len = token >> 4;
        if (len == 15 && (len = lz4_length(p, n, &ip, len)) < 0)
            return -1;
        if (n - ip < len || capacity - op < len)
            return -1;
        memcpy(w + op, p + ip, (size_t)len);
        ip += len;
        op += len;
        if (ip == n)
            break;  /* the last sequence: literals only */
        if (n - ip < 2)
            return -1;
        off = (Py_ssize_t)le(p + ip, 2);
        ip += 2;
        len = token & 15;
        if (len == 15 && (len = lz4_length(p, n, &ip, len)) < 0)
            return -1;
        len += LZ4_MIN_MATCH;
        if (off == 0 || off > op || capacity - op < len)
            return -1;
        match_start = op;
        copy_match(w + op, off, len);
        op += len;
        match_end = op;
    }
    if (op == 0 || (match_end >= 0 && (match_end > op - LZ4_LAST_LITERALS || match_start > op - LZ4_MFLIMIT)))
        return -1;
    return op;
}

/* lz4_framing.decode_lz4_frame (magic 2: the header checksum checked) for the frame Kafka writes: version
 * 1, independent blocks, no block or content checksum, no content size, size code 4..7, the end mark
 * ending the stream; anything else is declined. */
static Py_ssize_t
lz4_into(const uint8_t *p, Py_ssize_t n, Grow *dst)
{
    Py_ssize_t pos = 7, max_block;
    uint8_t flg, bd;
    dst->size = 0;
    if (n < 7 || le(p, 4) != LZ4_MAGIC)
        return -1;
    flg = p[4];
    bd = p[5];
    if (flg != 0x60 || (bd & 0x8F) != 0 || (bd >> 4) < 4
        || p[6] != ((XXH32(p + 4, 2, 0) >> 8) & 0xff))
        return -1;
    max_block = (Py_ssize_t)1 << (2 * (bd >> 4) + 8);
    for (;;) {
        uint32_t word;
        Py_ssize_t size, got;
        if (n - pos < 4)
            return -1;
        word = le(p + pos, 4);
        pos += 4;
        size = (Py_ssize_t)(word & ~LZ4_STORED);
        if (size == 0)
            return pos == n ? dst->size : -1;
        if (size > max_block || n - pos < size || dst->size + max_block > MAX_OUTPUT)
            return -1;
        if (grow_raw(dst, max_block) < 0)
            return -2;
        if (word & LZ4_STORED) {
            memcpy(dst->data + dst->size, p + pos, (size_t)size);
            got = size;
        }
        else if ((got = lz4_block(p + pos, size, (uint8_t *)dst->data + dst->size, max_block)) < 0)
            return -1;
        dst->size += got;
        pos += size;
    }
}

Py_ssize_t
codec_native_into(int codec, const uint8_t *p, Py_ssize_t n, Grow *dst)
{
    if (codec == CODEC_GZIP)
        return gzip_into(p, n, dst);
    if (codec == CODEC_SNAPPY)
        return snappy_into(p, n, dst);
    if (codec == CODEC_LZ4)
        return lz4_into(p, n, dst);
    return -1;
}

/* ---- snappy and lz4 framing around their library's blocks ------------------------------------------ */

#define XERIAL_BLOCK_SIZE (32 * 1024)  /* compression.XERIAL_BLOCK_SIZE */
#define LZ4_BLOCK_SIZE (64 * 1024)     /* lz4_framing.LZ4_BLOCK_SIZE */
#define LZ4_ONE_BLOCK_HEADER 7         /* lz4_framing._ONE_BLOCK_FRAME_HEADER */

static void
put_le32(uint8_t *w, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        w[k] = (uint8_t)(v >> (8 * k));
}

/* One block of p[0, n) through `block` appended to dst as the framing wants it: snappy's raw block after its
 * big-endian length, lz4's block (taken out of the one-block frame, lz4_framing._compress_block) after its
 * size word. 0, -1 declined, -2 out of memory, -3 a Python error set. */
static int
framed_block(Grow *dst, int codec, PyObject *block, const uint8_t *p, Py_ssize_t n)
{
    PyObject *raw = PyMemoryView_FromMemory((char *)p, n, PyBUF_READ), *out;
    Py_buffer b;
    const uint8_t *data;
    Py_ssize_t size;
    uint32_t word = 0;
    int r = 0;
    if (raw == NULL)
        return -3;
    out = PyObject_CallOneArg(block, raw);
    Py_DECREF(raw);
    if (out == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception) || PyErr_ExceptionMatches(PyExc_MemoryError))
            return -3;
        PyErr_Clear();
        return -1;
    }
    if (PyObject_GetBuffer(out, &b, PyBUF_SIMPLE) < 0) {
        Py_DECREF(out);
        PyErr_Clear();
        return -1;
    }
    data = b.buf;
    size = b.len;
    if (codec == CODEC_LZ4) {
        if (size < LZ4_ONE_BLOCK_HEADER + 4)
            r = -1;
        else {
            word = le(data + LZ4_ONE_BLOCK_HEADER, 4);
            data += LZ4_ONE_BLOCK_HEADER + 4;
            size = (Py_ssize_t)(word & ~LZ4_STORED);
            if (size > b.len - LZ4_ONE_BLOCK_HEADER - 4)
                r = -1;
        }
    }
    else if (size > INT32_MAX)
        r = -1;
    if (r == 0 && grow_raw(dst, 4 + size) < 0)
        r = -2;
    if (r == 0) {
        uint8_t *w = (uint8_t *)dst->data + dst->size;
        if (codec == CODEC_LZ4)
            put_le32(w, word);
        else
            put_be(w, (uint64_t)size, 4);
        memcpy(w + 4, data, (size_t)size);
        dst->size += 4 + size;
    }
    PyBuffer_Release(&b);
    Py_DECREF(out);
    return r;
}

Py_ssize_t
framed_compress_into(Grow *dst, int codec, PyObject *block, const uint8_t *p, Py_ssize_t n)
{
    Py_ssize_t at = dst->size, step = codec == CODEC_LZ4 ? LZ4_BLOCK_SIZE : XERIAL_BLOCK_SIZE;
    uint8_t *w;
    if (n <= 0 || grow_raw(dst, 16) < 0)
        return n <= 0 ? -1 : -2;
    w = (uint8_t *)dst->data + at;
    if (codec == CODEC_LZ4) {  /* lz4_framing.encode_lz4_frame's header for magic 2 */
        put_le32(w, LZ4_MAGIC);
        w[4] = 0x60;
        w[5] = 0x40;
        w[6] = (uint8_t)((XXH32(w + 4, 2, 0) >> 8) & 0xff);
        dst->size += 7;
    }
    else {  /* XERIAL_HEADER_STRUCT: magic, version 1, minimum compatible version 1 */
        memcpy(w, XERIAL_MAGIC, 8);
        put_be(w + 8, 1, 4);
        put_be(w + 12, 1, 4);
        dst->size += 16;
    }
    for (Py_ssize_t start = 0; start < n; start += step) {
        int r = framed_block(dst, codec, block, p + start, n - start < step ? n - start : step);
        if (r < 0) {
            dst->size = at;
            return r;
        }
    }
    if (codec == CODEC_LZ4) {
        if (grow_raw(dst, 4) < 0) {
            dst->size = at;
            return -2;
        }
        put_le32((uint8_t *)dst->data + dst->size, 0);  /* the end mark */
        dst->size += 4;
    }
    return dst->size - at;
}

/* ---- the round's inflated payloads ----------------------------------------------------------- */

/* The most bytes (compressed and inflated) kept at once: set by each round's forget_inflated(budget), which
 * the cleaner gives a small round only (its whole dirty section: ~10 MiB inflated for 2 MiB of gzip) and a
 * larger one none, so that its peak memory stays what it was. Until a first call, INFLATED_DEFAULT. */
#define INFLATED_DEFAULT ((Py_ssize_t)16 << 20)
static Py_ssize_t store_budget = INFLATED_DEFAULT;
#define INFLATED_BUCKETS 4096

struct Inflated {
    Inflated *next;  /* in its bucket */
    uint64_t hash;
    int codec;
    Py_ssize_t n, m;  /* compressed, inflated; data holds the compressed bytes then the records */
    uint8_t data[];
};

/* One store per process, shared by the threads that clean a partition's chunks (pass 1 on one thread, pass
 * 2 of the same batch on another), so under a lock held for table work only; a forked child starts empty.
 * Entries leave when pass 2 takes them, or all at once at the next round's pass 1 (forget_inflated). */
static pthread_mutex_t store_lock = PTHREAD_MUTEX_INITIALIZER;
static Inflated *store[INFLATED_BUCKETS];
static Py_ssize_t store_held;

static uint64_t
payload_hash(int codec, const uint8_t *p, Py_ssize_t n)
{
    return XXH3_64bits_withSeed(p, (size_t)n, (XXH64_hash_t)codec);
}

void
inflated_keep(int codec, const uint8_t *p, Py_ssize_t n, const uint8_t *out, Py_ssize_t m)
{
    Inflated *e;
    Py_ssize_t cost = (Py_ssize_t)sizeof(Inflated) + n + m;
    Py_ssize_t budget = __atomic_load_n(&store_budget, __ATOMIC_RELAXED);
    if (cost > budget || __atomic_load_n(&store_held, __ATOMIC_RELAXED) + cost > budget)
        return;
    if ((e = PyMem_RawMalloc((size_t)cost)) == NULL)
        return;  /* only a cache: pass 2 decompresses */
    e->hash = payload_hash(codec, p, n);
    e->codec = codec;
    e->n = n;
    e->m = m;
    memcpy(e->data, p, (size_t)n);
    memcpy(e->data + n, out, (size_t)m);
    pthread_mutex_lock(&store_lock);
    if (store_held + cost > budget) {
        pthread_mutex_unlock(&store_lock);
        PyMem_RawFree(e);
        return;
    }
    e->next = store[e->hash % INFLATED_BUCKETS];
    store[e->hash % INFLATED_BUCKETS] = e;
    __atomic_store_n(&store_held, store_held + cost, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&store_lock);
}

Inflated *
inflated_take(int codec, const uint8_t *p, Py_ssize_t n)
{
    uint64_t hash;
    Inflated **at, *e = NULL;
    if (__atomic_load_n(&store_held, __ATOMIC_RELAXED) == 0)
        return NULL;
    hash = payload_hash(codec, p, n);
    pthread_mutex_lock(&store_lock);
    for (at = &store[hash % INFLATED_BUCKETS]; *at != NULL; at = &(*at)->next) {
        Inflated *c = *at;
        if (c->hash == hash && c->codec == codec && c->n == n && memcmp(c->data, p, (size_t)n) == 0) {
            *at = c->next;
            __atomic_store_n(&store_held, store_held - ((Py_ssize_t)sizeof(Inflated) + c->n + c->m),
                             __ATOMIC_RELAXED);
            e = c;
            break;
        }
    }
    pthread_mutex_unlock(&store_lock);
    return e;
}

const uint8_t *
inflated_records(const Inflated *e, Py_ssize_t *size)
{
    *size = e->m;
    return e->data + e->n;
}

void
inflated_free(Inflated *e)
{
    PyMem_RawFree(e);
}

const uint8_t *
codec_records(int codec, const uint8_t *p, Py_ssize_t n, int64_t native, Grow *scratch, Inflated **kept,
              Py_ssize_t *m)
{
    if ((*kept = inflated_take(codec, p, n)) != NULL)
        return inflated_records(*kept, m);
    *m = native & (1 << codec) ? codec_native_into(codec, p, n, scratch) : -1;
    return *m >= 0 ? (const uint8_t *)scratch->data : NULL;
}

/* Every entry freed; with `lock` 0 in a forked child, whose lock another thread of the parent may have held. */
static void
store_clear(int lock)
{
    if (lock)
        pthread_mutex_lock(&store_lock);
    for (int b = 0; b < INFLATED_BUCKETS; b++)
        while (store[b] != NULL) {
            Inflated *e = store[b];
            store[b] = e->next;
            PyMem_RawFree(e);
        }
    __atomic_store_n(&store_held, 0, __ATOMIC_RELAXED);
    if (lock)
        pthread_mutex_unlock(&store_lock);
}

static void
store_after_fork(void)
{
    pthread_mutex_init(&store_lock, NULL);
    store_clear(0);
}

int
inflated_init(void)
{
    if (pthread_atfork(NULL, NULL, store_after_fork) != 0) {
        PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
        return -1;
    }
    return 0;
}

const char forget_inflated_doc[] =
    "forget_inflated(budget) -> None\n\n"
    "Drop every batch's records pass 1 kept for pass 2 (a round's pass 1 starts with it); from now on keep\n"
    "at most `budget` bytes (compressed and inflated, with their bookkeeping; 0: keep none).";

PyObject *
forget_inflated(PyObject *module, PyObject *args)
{
    Py_ssize_t budget;
    if (!PyArg_ParseTuple(args, "n:forget_inflated", &budget))
        return NULL;
    if (budget < 0) {
        PyErr_SetString(PyExc_ValueError, "forget_inflated: budget below 0");
        return NULL;
    }
    __atomic_store_n(&store_budget, budget, __ATOMIC_RELAXED);
    Py_BEGIN_ALLOW_THREADS
    store_clear(1);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

const char inflated_held_doc[] =
    "inflated_held() -> int\n\n"
    "The bytes pass 1's kept batches hold now (compressed and inflated, with their bookkeeping).";

PyObject *
inflated_held(PyObject *module, PyObject *unused)
{
    return PyLong_FromSsize_t(__atomic_load_n(&store_held, __ATOMIC_RELAXED));
}
