/*
 * kcompact/cleaner/round/_windows_zstd.h -- the windows' zstd (_windows_zstd.c), for _windows.c.
 */
#ifndef KCOMPACT_WINDOWS_ZSTD_H
#define KCOMPACT_WINDOWS_ZSTD_H

#include "common.h"
#include "zstd.h"

#define ZSTD_FRAME_MAGIC 0xFD2FB528u
#define ZSTD_BLOCK_MAX (128 * 1024)  /* the most one block inflates to (RFC 8878) */
#define ZSTD_FRAME_MAX (64 << 20)  /* the most the windows inflate one frame to themselves */

/* Where the library decompresses to: one buffer per thread reused by every batch. */
extern KCOMPACT_HIDDEN __thread Grow zstd_scratch;

/* records.compression._zstd_one_block_bound: the bound of one call for Kafka's usual frame, else 0. */
KCOMPACT_HIDDEN Py_ssize_t zstd_one_block_bound(const uint8_t *p, Py_ssize_t n);
/* zstd_fn(view, max_output_size=bound): a new bytes object, or NULL (an error set or not). */
KCOMPACT_HIDDEN PyObject *zstd_one_call(PyObject *zstd_fn, PyObject *view, Py_ssize_t bound);
/* The output bound of one frame p[0, n) of any number of blocks, 0 when not exactly one whole frame. */
KCOMPACT_HIDDEN Py_ssize_t zstd_frame_bound(const uint8_t *p, Py_ssize_t n);
/* Decompress one frame into dst[0, bound) (no GIL needed): the length, or -1 refused. */
KCOMPACT_HIDDEN Py_ssize_t zstd_native_into(const uint8_t *p, Py_ssize_t n, Py_ssize_t bound, void *dst);
/* Decompress into zstd_scratch (no GIL needed): the length, -1 refused, -2 out of memory (nothing set). */
KCOMPACT_HIDDEN Py_ssize_t zstd_native_into_scratch(const uint8_t *p, Py_ssize_t n, Py_ssize_t bound);
/* The same as a new bytes object, or NULL (an error set or not). */
KCOMPACT_HIDDEN PyObject *zstd_native_decompress(const uint8_t *p, Py_ssize_t n, Py_ssize_t bound);
/* Give zstd_scratch back when a big frame made it large. */
KCOMPACT_HIDDEN void zstd_scratch_trim(void);
/* records.compression.compress(ZSTD, p[0, n)) appended to dst (no GIL needed): its length, -1 refused,
 * -2 out of memory (nothing set). */
KCOMPACT_HIDDEN Py_ssize_t zstd_native_compress_into(Grow *dst, const uint8_t *p, Py_ssize_t n);
/* The module's zstd_version(): ZSTD_versionNumber(). */
KCOMPACT_HIDDEN PyObject *zstd_version(PyObject *module, PyObject *unused);
extern KCOMPACT_HIDDEN const char zstd_version_doc[];

#endif
