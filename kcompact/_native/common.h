/*
 * kcompact/_native/common.h -- what every compiled module of kcompact shares: the ScanError
 * contract, argument checks, Kafka's varints, big-endian fields, a growing buffer, and CRC-32C.
 *
 * Why a header: each owner of a kernel has its own extension module beside its Python code
 * (records/scan/_accel.c + _legacy.c: the scan; cleaner/offset_map/_runs.c: the offset map's runs;
 * cleaner/round/_windows.c: the round's windows), and these helpers are the few lines all of them
 * read the same way. Everything here is static inline: each module compiles its own copy and there
 * is no symbol to clash between the shared objects.
 *
 * The contract with the Python wrappers (records/scan/accel.py, cleaner/offset_map/accel.py,
 * cleaner/round/accel.py): a kernel returns exactly what its pure-Python reference returns, or
 * raises its module's ScanError(position) and leaves nothing behind; position is where the
 * reference reports the first problem, or DECLINED (-1) for arguments the kernel does not take.
 * Each module's init creates its ScanError (kcompact_module below) and stores it in
 * kcompact_scan_error, which that module's sources define once.
 */
#ifndef KCOMPACT_NATIVE_COMMON_H
#define KCOMPACT_NATIVE_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define VARINT_MAX_BYTES 5
#define VARLONG_MAX_BYTES 10
#define DECLINED (-1)      /* ScanError position: arguments the kernel does not take */

/* Hidden: each shared object's own globals stay its own, whatever another one loaded names. */
#if defined(__GNUC__)
#define KCOMPACT_HIDDEN __attribute__((visibility("hidden")))
#else
#define KCOMPACT_HIDDEN
#endif

/* This module's ScanError (defined in the module's init source, set by kcompact_module). */
extern KCOMPACT_HIDDEN PyObject *kcompact_scan_error;

/* Raise ScanError(position); always returns NULL. */
static inline PyObject *
scan_error(Py_ssize_t position)
{
    PyObject *arg = PyLong_FromSsize_t(position);
    if (arg != NULL) {
        PyErr_SetObject(kcompact_scan_error, arg);
        Py_DECREF(arg);
    }
    return NULL;
}

/* The module of `def`, with its ScanError (named error_name) created, stored in
 * kcompact_scan_error and added as the module's attribute ScanError; NULL with an error set. */
static inline PyObject *
kcompact_module(struct PyModuleDef *def, const char *error_name)
{
    PyObject *module;
    kcompact_scan_error = PyErr_NewException(error_name, PyExc_Exception, NULL);
    module = kcompact_scan_error ? PyModule_Create(def) : NULL;
    if (module == NULL || PyModule_AddObjectRef(module, "ScanError", kcompact_scan_error) < 0) {
        Py_XDECREF(module);
        return NULL;
    }
    return module;
}

/* ---- arguments -------------------------------------------------------------------------- */

/* Our own wrappers always pass every argument; anything else is a bug, not data. */
static inline int
check_nargs(const char *name, Py_ssize_t nargs, Py_ssize_t expected)
{
    if (nargs == expected)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, expected, nargs);
    return -1;
}

/* An exact int in the int64 range (int subclasses, numpy integers and big ints are declined:
 * the reference's arithmetic on them is not int64 arithmetic). 0 on success. */
static inline int
as_int64(PyObject *obj, int64_t *out)
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

/* A flat, contiguous buffer of single bytes whose len() is its size in bytes. 0 on success. */
static inline int
get_bytes(PyObject *obj, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return -1;
    }
    if (view->ndim != 1 || view->itemsize != 1) {
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* A flat buffer of native int64 (array('q'), or array('l') where long is 64 bits). */
/* A 1-d C-contiguous buffer of 8-byte integers whose format is `letter` or `alias` (numpy names
 * int64 q or l, uint64 Q or L); -1 without an exception when it is not one. */
static inline int
get_8byte_ints(PyObject *obj, Py_buffer *view, char letter, char alias)
{
    const char *format;
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return -1;
    }
    format = view->format == NULL ? "B" : view->format;
    if (view->ndim != 1 || view->itemsize != 8 || format[1] != '\0'
        || (format[0] != letter && format[0] != alias)) {
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}


/* ---- varints ---------------------------------------------------------------------------- */

/* The unsigned base-128 value at v, read as records/scan/__init__.py does: its 1- and 2-byte fast paths index
 * the data directly (an IndexError there is reported at the record start `record`), longer
 * forms go through decode_varint/decode_varlong (errors at v). Keeps the low 64 bits, like
 * Java's shifts; callers keep the low 32 for a varint. 0 on success, else -1 with *err set. */
static inline int
read_raw(const uint8_t *d, Py_ssize_t n, Py_ssize_t v, Py_ssize_t record, int max_bytes,
         uint64_t *raw, Py_ssize_t *next, Py_ssize_t *err)
{
    uint64_t result = 0;
    int shift = 0;
    Py_ssize_t index = v;
    if (v >= n) {
        *err = record;
        return -1;
    }
    if (d[v] < 0x80) {
        *raw = d[v];
        *next = v + 1;
        return 0;
    }
    if (v + 1 >= n) {
        *err = record;
        return -1;
    }
    if (d[v + 1] < 0x80) {
        *raw = (uint64_t)(d[v] & 0x7F) | ((uint64_t)d[v + 1] << 7);
        *next = v + 2;
        return 0;
    }
    for (;;) {
        uint8_t byte;
        if (index >= n) {
            *err = v;
            return -1;
        }
        byte = d[index++];
        result |= (uint64_t)(byte & 0x7F) << shift;  /* shift <= 63: loop ends by 10 bytes */
        if (byte < 0x80) {
            *raw = result;
            *next = index;
            return 0;
        }
        shift += 7;
        if (index - v >= max_bytes) {
            *err = v;
            return -1;
        }
    }
}

static inline int
read_varint(const uint8_t *d, Py_ssize_t n, Py_ssize_t v, Py_ssize_t record, int32_t *value,
            Py_ssize_t *next, Py_ssize_t *err)
{
    uint64_t raw;
    uint32_t u;
    if (read_raw(d, n, v, record, VARINT_MAX_BYTES, &raw, next, err) < 0)
        return -1;
    u = (uint32_t)raw;
    *value = (int32_t)((u >> 1) ^ (0U - (u & 1U)));
    return 0;
}

static inline int
read_varlong(const uint8_t *d, Py_ssize_t n, Py_ssize_t v, Py_ssize_t record, int64_t *value,
             Py_ssize_t *next, Py_ssize_t *err)
{
    uint64_t raw;
    if (read_raw(d, n, v, record, VARLONG_MAX_BYTES, &raw, next, err) < 0)
        return -1;
    *value = (int64_t)((raw >> 1) ^ (0ULL - (raw & 1ULL)));
    return 0;
}

/* Zig-zag encodings, minimal, as encode_varlong / encode_varint write them. */
static inline Py_ssize_t
unsigned_size(uint64_t u)
{
    Py_ssize_t size = 1;
    while (u >= 0x80) {
        u >>= 7;
        size++;
    }
    return size;
}

static inline uint64_t
zigzag64(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);  /* gcc: >> of a negative is arithmetic */
}

static inline uint8_t *
put_unsigned(uint8_t *out, uint64_t u)
{
    while (u >= 0x80) {
        *out++ = (uint8_t)((u & 0x7F) | 0x80);
        u >>= 7;
    }
    *out++ = (uint8_t)u;
    return out;
}


/* ---- big-endian fields ------------------------------------------------------------------ */

static inline uint64_t
be(const uint8_t *p, int size)
{
    uint64_t value = 0;
    for (int k = 0; k < size; k++)
        value = (value << 8) | p[k];
    return value;
}


static inline void
put_be(uint8_t *p, uint64_t value, int size)
{
    for (int k = size - 1; k >= 0; k--) {
        p[k] = (uint8_t)value;
        value >>= 8;
    }
}

/* ---- a growing output buffer ------------------------------------------------------------ */

typedef struct {
    char *data;
    Py_ssize_t size, capacity;
} Grow;

/* The capacity g needs for `more` bytes past g->size (doubling from 4096), or 0 when it has room. */
static inline Py_ssize_t
grow_capacity(const Grow *g, Py_ssize_t more)
{
    Py_ssize_t want = g->size + more, capacity = g->capacity > 0 ? g->capacity : 4096;
    if (want <= g->capacity)
        return 0;
    while (capacity < want)
        capacity *= 2;
    return capacity;
}

/* Room for `more` bytes past g->size; 0, or -1 with MemoryError set. */
static inline int
grow(Grow *g, Py_ssize_t more)
{
    Py_ssize_t capacity = grow_capacity(g, more);
    char *data;
    if (capacity == 0)
        return 0;
    data = PyMem_Realloc(g->data, (size_t)capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    g->data = data;
    g->capacity = capacity;
    return 0;
}


/* grow() for a kernel that runs without the GIL: the same, through PyMem_Raw (free with PyMem_RawFree);
 * 0, or -1 with nothing set (the caller raises MemoryError once it holds the GIL again). */
static inline int
grow_raw(Grow *g, Py_ssize_t more)
{
    Py_ssize_t capacity = grow_capacity(g, more);
    char *data;
    if (capacity == 0)
        return 0;
    data = PyMem_RawRealloc(g->data, (size_t)capacity);
    if (data == NULL)
        return -1;
    g->data = data;
    g->capacity = capacity;
    return 0;
}


/* ---- checksums: crc32c.h (no Python in it: scripts/floor_clean.c includes it too) ------------- */
#include "crc32c.h"


#endif
