/*
 * kcompact/_native/crc32c.h -- CRC-32C for the C kernels (through common.h) and for the benchmark's floor
 * program (scripts/floor_clean.c), so both checksum with the same code. Plain C: no Python in here.
 */
#ifndef KCOMPACT_NATIVE_CRC32C_H
#define KCOMPACT_NATIVE_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78: Kafka's Crc32C) of n bytes at p, computed here
 * with no call into Python: the CPU's crc32 instruction where it has one (x86-64 SSE4.2, detected at
 * run time; arm64 with the CRC extension at compile time), else eight tables a byte of eight at a time.
 * On x86-64 the instruction runs three streams at once over three consecutive blocks (its latency is three
 * times its throughput), the three crcs then joined with the "append n zero bytes" operator as tables
 * (Mark Adler's method for combining CRCs). The `crc32c` package (records.crc.crc32c_package) is the
 * reference; tests/records/test_crc.py checks every path against it. */
#define CRC32C_POLY 0x82F63B78u

#if defined(__GNUC__)
#define KCOMPACT_MAYBE_UNUSED __attribute__((unused))
#else
#define KCOMPACT_MAYBE_UNUSED
#endif
static KCOMPACT_MAYBE_UNUSED uint32_t crc32c_tables[8][256];
static KCOMPACT_MAYBE_UNUSED int crc32c_ready;  /* 1 tables made (portable), 2 SSE4.2 */
/* The three-stream blocks (powers of two) and, per block size, its zeros operator as four byte tables. */
#define CRC32C_LONG 4096
#define CRC32C_SHORT 256
static KCOMPACT_MAYBE_UNUSED uint32_t crc32c_long_zeros[4][256], crc32c_short_zeros[4][256];

/* GF(2) 32x32 matrix (one column a word) times a vector; the square of a matrix. */
static inline uint32_t
crc32c_gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1)
            sum ^= *mat;
    return sum;
}

static inline void
crc32c_gf2_square(uint32_t *square, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++)
        square[n] = crc32c_gf2_times(mat, mat[n]);
}

/* The tables of the operator that appends `len` zero bytes (a power of two) to a running crc: one zero bit's
 * operator squared up to eight bits, then once per halving of `len`. */
static inline void
crc32c_zeros_tables(uint32_t zeros[4][256], size_t len)
{
    uint32_t even[32], odd[32], *op, row = 1;
    odd[0] = CRC32C_POLY;
    for (int n = 1; n < 32; n++, row <<= 1)
        odd[n] = row;
    crc32c_gf2_square(even, odd);  /* two zero bits */
    crc32c_gf2_square(odd, even);  /* four */
    op = odd;
    for (;;) {
        crc32c_gf2_square(even, odd);  /* eight zero bits: one byte, then two, four... */
        op = even;
        len >>= 1;
        if (len == 0)
            break;
        crc32c_gf2_square(odd, even);
        op = odd;
        len >>= 1;
        if (len == 0)
            break;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 0; k < 4; k++)
            zeros[k][n] = crc32c_gf2_times(op, n << (8 * k));
}

/* A running crc moved past the zero bytes of the tables' operator. */
static inline uint32_t
crc32c_shift(uint32_t zeros[4][256], uint32_t c)
{
    return zeros[0][c & 0xff] ^ zeros[1][(c >> 8) & 0xff] ^ zeros[2][(c >> 16) & 0xff] ^ zeros[3][c >> 24];
}

static inline void
crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc32c_tables[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc32c_tables[t][i] = (crc32c_tables[t - 1][i] >> 8)
                ^ crc32c_tables[0][crc32c_tables[t - 1][i] & 0xff];
    crc32c_zeros_tables(crc32c_long_zeros, CRC32C_LONG);
    crc32c_zeros_tables(crc32c_short_zeros, CRC32C_SHORT);
    crc32c_ready = 1;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("sse4.2"))
        crc32c_ready = 2;
#endif
}

/* The table path: a running (inverted) crc over n bytes. */
static inline uint32_t
crc32c_portable(uint32_t c, const uint8_t *p, ptrdiff_t n)
{
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16
                           | (uint32_t)p[3] << 24);
        c = crc32c_tables[7][lo & 0xff] ^ crc32c_tables[6][(lo >> 8) & 0xff]
            ^ crc32c_tables[5][(lo >> 16) & 0xff] ^ crc32c_tables[4][lo >> 24]
            ^ crc32c_tables[3][p[4]] ^ crc32c_tables[2][p[5]] ^ crc32c_tables[1][p[6]]
            ^ crc32c_tables[0][p[7]];
    }
    while (n-- > 0)
        c = crc32c_tables[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2"))) static inline uint64_t
crc32c_sse42_blocks(uint64_t c64, const uint8_t **at, ptrdiff_t *left, ptrdiff_t block,
                    uint32_t zeros[4][256])
{
    const uint8_t *p = *at;
    ptrdiff_t n = *left;
    for (; n >= 3 * block; n -= 3 * block, p += 3 * block) {
        uint64_t c1 = 0, c2 = 0;
        for (ptrdiff_t k = 0; k < block; k += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p + k, 8);
            memcpy(&w1, p + block + k, 8);
            memcpy(&w2, p + 2 * block + k, 8);
            c64 = __builtin_ia32_crc32di(c64, w0);
            c1 = __builtin_ia32_crc32di(c1, w1);
            c2 = __builtin_ia32_crc32di(c2, w2);
        }
        c64 = crc32c_shift(zeros, (uint32_t)c64) ^ (uint32_t)c1;
        c64 = crc32c_shift(zeros, (uint32_t)c64) ^ (uint32_t)c2;
    }
    *at = p;
    *left = n;
    return c64;
}

__attribute__((target("sse4.2"))) static inline uint32_t
crc32c_sse42(uint32_t c, const uint8_t *p, ptrdiff_t n)
{
    uint64_t c64 = c;
    c64 = crc32c_sse42_blocks(c64, &p, &n, CRC32C_LONG, crc32c_long_zeros);
    c64 = crc32c_sse42_blocks(c64, &p, &n, CRC32C_SHORT, crc32c_short_zeros);
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c64 = __builtin_ia32_crc32di(c64, word);
    }
    c = (uint32_t)c64;
    while (n-- > 0)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

#if defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#endif

/* CRC-32C of n bytes at p; `portable` forces the table path (for the tests). */
static inline uint32_t
crc32c_with(const uint8_t *p, ptrdiff_t n, int portable)
{
    uint32_t c = 0xFFFFFFFFu;
    if (!crc32c_ready)
        crc32c_init();
#if defined(__x86_64__) && defined(__GNUC__)
    if (crc32c_ready == 2 && !portable)
        return ~crc32c_sse42(c, p, n);
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
    if (!portable) {
        for (; n >= 8; n -= 8, p += 8) {
            uint64_t word;
            memcpy(&word, p, 8);
            c = __crc32cd(c, word);
        }
        while (n-- > 0)
            c = __crc32cb(c, *p++);
        return ~c;
    }
#endif
    return ~crc32c_portable(c, p, n);
}

static inline uint32_t
crc32c_of(const uint8_t *p, ptrdiff_t n)
{
    return crc32c_with(p, n, 0);
}


#endif
