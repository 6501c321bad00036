/*
 * floor_clean.c -- the machine's floor for a clean without codecs (scripts/bench_ratio.py compiles it
 * with `cc -O2` at run time): what any compactor of these segments must at least do, in one thread.
 *
 *   floor_clean OUT_DIR KEEP_PERMILLE SEGMENT...
 *
 * Reads every segment whole (read(2)), checks the CRC-32C of every v2 batch (bytes 21..end, as
 * Kafka's DefaultRecordBatch.isValid), writes the kept batches (KEEP_PERMILLE of the input's bytes,
 * spread evenly over it: the clean's output share) to one file per segment in OUT_DIR, CRC-32C's
 * every batch written (a rebuilt batch's new checksum), fsyncs each file and OUT_DIR. CRC-32C by the
 * clean's own code (kcompact/_native/crc32c.h: SSE4.2 in three streams where the CPU has it, else tables),
 * so the floor checksums exactly as fast as the clean can. Prints the bytes read,
 * the bytes written and a sum of the CRCs (so none is optimised away).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* the kernels' own CRC-32C (kcompact/_native/crc32c.h): the same three streams of SSE4.2 where the CPU has
 * it, else tables */
#include "../kcompact/_native/crc32c.h"

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]; }

int main(int argc, char **argv)
{
    long long read_bytes = 0, written = 0, permille;
    uint32_t crc_sum = 0;
    if (argc < 4)
        return fprintf(stderr, "usage: floor_clean OUT_DIR KEEP_PERMILLE SEGMENT...\n"), 2;
    permille = atoll(argv[2]);
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
            uint32_t crc = crc32c_of(data + at + 21, (ptrdiff_t)n - 21);
            crc_sum += crc ^ be32(data + at + 17);  /* 0 for a valid batch */
            seen += n;
            if ((kept + n) * 1000 <= seen * (size_t)permille) {  /* kept: copied out, CRC'd again */
                memcpy(kept_bytes + kept, data + at, n);
                crc_sum += crc32c_of(kept_bytes + kept + 21, (ptrdiff_t)n - 21) ^ crc;
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
