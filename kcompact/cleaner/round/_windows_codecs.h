/*
 * kcompact/cleaner/round/_windows_codecs.h -- the windows' gzip, snappy and lz4 batches and the round's
 * inflated payloads (_windows_codecs.c), for _windows.c.
 */
#ifndef KCOMPACT_WINDOWS_CODECS_H
#define KCOMPACT_WINDOWS_CODECS_H

#include "common.h"

#define CODEC_GZIP 1
#define CODEC_SNAPPY 2
#define CODEC_LZ4 3

/* A gzip, snappy (xerial) or lz4 (Kafka's frame) batch's records p[0, n) decompressed into dst, replacing
 * what it held (no GIL needed): their length, -1 declined (not the usual shape, or corrupt: the Python path
 * takes it and words the error), -2 out of memory. */
KCOMPACT_HIDDEN Py_ssize_t codec_native_into(int codec, const uint8_t *p, Py_ssize_t n, Grow *dst);
/* records.compression.compress(GZIP, p[0, n)) appended to dst (no GIL needed): its length, -1 refused,
 * -2 out of memory (dst's size unchanged either way). */
KCOMPACT_HIDDEN Py_ssize_t gzip_native_compress_into(Grow *dst, const uint8_t *p, Py_ssize_t n);
/* records.compression.compress(SNAPPY or LZ4, p[0, n)) with the library's block function `block`
 * (compression.block_compressors'), the xerial or Kafka's lz4 framing done here, appended to dst; the GIL
 * held. Its length, -1 declined (`block` raised an ordinary error or gave what is not a block), -2 out of
 * memory, -3 a Python error set (dst's size unchanged but for success). */
KCOMPACT_HIDDEN Py_ssize_t framed_compress_into(Grow *dst, int codec, PyObject *block, const uint8_t *p,
                                                Py_ssize_t n);
/* The module's zlib_version(): the linked zlib's zlibVersion(). */
KCOMPACT_HIDDEN PyObject *zlib_runtime_version(PyObject *module, PyObject *unused);
extern KCOMPACT_HIDDEN const char zlib_runtime_version_doc[];

/* The round's inflated payloads: pass 1 keeps what it decompressed, pass 2 takes it instead of decompressing
 * the same bytes again. */
typedef struct Inflated Inflated;
/* Keep a copy of compressed p[0, n) of `codec` and its records out[0, m) (no GIL needed; nothing when the
 * budget is spent). */
KCOMPACT_HIDDEN void inflated_keep(int codec, const uint8_t *p, Py_ssize_t n, const uint8_t *out, Py_ssize_t m);
/* The records of compressed p[0, n) of `codec` where pass 1 kept them, taken out of the store (the caller
 * frees them with inflated_free), or NULL (no GIL needed). */
KCOMPACT_HIDDEN Inflated *inflated_take(int codec, const uint8_t *p, Py_ssize_t n);
KCOMPACT_HIDDEN const uint8_t *inflated_records(const Inflated *e, Py_ssize_t *size);
/* Free a taken entry (NULL: nothing). */
KCOMPACT_HIDDEN void inflated_free(Inflated *e);
/* Pass 2's records of a compressed batch p[0, n): pass 1's (*kept: free with inflated_free once copied), else
 * a gzip, snappy or lz4 batch's decoded into scratch where bit 1 << codec of `native` is set (*kept NULL); or
 * NULL, *m -1 (the caller decompresses) or -2 (out of memory). No GIL needed. */
KCOMPACT_HIDDEN const uint8_t *codec_records(int codec, const uint8_t *p, Py_ssize_t n, int64_t native,
                                             Grow *scratch, Inflated **kept, Py_ssize_t *m);
/* The module's forget_inflated() and inflated_held(). */
KCOMPACT_HIDDEN PyObject *forget_inflated(PyObject *module, PyObject *args);
extern KCOMPACT_HIDDEN const char forget_inflated_doc[];
KCOMPACT_HIDDEN PyObject *inflated_held(PyObject *module, PyObject *unused);
extern KCOMPACT_HIDDEN const char inflated_held_doc[];
/* At module init: the store's lock, reset in a forked child. 0, or -1 with an error set. */
KCOMPACT_HIDDEN int inflated_init(void);

#endif
