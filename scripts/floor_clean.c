/*
 * floor_clean.c -- the machine's floor for a clean without codecs (scripts/bench_ratio.py compiles it
 * with `cc -O2` at run time): what any compactor of these segments must at least do, in one thread.
 *
 *   floor_clean OUT_DIR KEEP_PERMILLE SEGMENT...
 *
 * Reads every segment whole (read(2)), checks the CRC-32C of every v2 batch (bytes 21..end, as
 * Kafka's DefaultRecordBatch.isValid), writes the kept batches (KEEP_PERMILLE of the input's bytes,
 * spread evenly over it: the clean's output share) to one file per segment in OUT_DIR, CRC-32C's
 * every batch written (a rebuilt batch's new checksum), fsyncs each file and OUT_DIR. CRC-32C with
 * SSE4.2 where the CPU has it (the clean's own CRC does the same), else a table. Prints the bytes read,
 * the bytes written and a sum of the CRCs (so none is optimised away).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint32_t table[256];

static uint32_t crc_table(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    while (n--)
        crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = __builtin_ia32_crc32di(c, word);
    }
    while (n--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

static uint32_t (*crc32c)(uint32_t, const uint8_t *, size_t) = crc_table;

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]; }

int main(int argc, char **argv)
{
    long long read_bytes = 0, written = 0, permille;
    uint32_t crc_sum = 0;
    if (argc < 4)
        return fprintf(stderr, "usage: floor_clean OUT_DIR KEEP_PERMILLE SEGMENT...\n"), 2;
    permille = atoll(argv[2]);
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[i] = c;
    }
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2"))
        crc32c = crc_sse42;
#endif
    for (int s = 3; s < argc; s++) {
        struct stat st;
        char out_path[4096];
        int in = open(argv[s], O_RDONLY), out;
        if (in < 0 || fstat(in, &st) < 0)
            return perror(argv[s]), 1;
        uint8_t *data = malloc((size_t)st.st_size + 1), *kept_bytes = malloc((size_t)st.st_size + 1);
        size_t size = 0, kept = 0;
        for (ssize_t got; size < (size_t)st.st_size && (got = read(in, data + size, st.st_size - size)) > 0;)
            size += (size_t)got;
        close(in);
        read_bytes += (long long)size;
        snprintf(out_path, sizeof out_path, "%s/%s", argv[1], strrchr(argv[s], '/') ? strrchr(argv[s], '/') + 1 : argv[s]);
        out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out < 0)
            return perror(out_path), 1;
        for (size_t at = 0, seen = 0; at + 61 <= size;) {
            size_t n = be32(data + at + 8) + 12;
            if (at + n > size)
                break;
            uint32_t crc = crc32c(0, data + at + 21, n - 21);
            crc_sum += crc ^ be32(data + at + 17);  /* 0 for a valid batch */
            seen += n;
            if ((kept + n) * 1000 <= seen * (size_t)permille) {  /* kept: copied out, CRC'd again */
                memcpy(kept_bytes + kept, data + at, n);
                crc_sum += crc32c(0, kept_bytes + kept + 21, n - 21) ^ crc;
                kept += n;
            }
            at += n;
        }
        if (write(out, kept_bytes, kept) != (ssize_t)kept || fsync(out) < 0 || close(out) < 0)
            return perror(out_path), 1;
        written += (long long)kept;
        free(data);
        free(kept_bytes);
    }
    int dir = open(argv[1], O_RDONLY);
    if (dir < 0 || fsync(dir) < 0)
        return perror(argv[1]), 1;
    close(dir);
    printf("%lld %lld %u\n", read_bytes, written, crc_sum);
    return 0;
}
