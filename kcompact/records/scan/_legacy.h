/* The legacy entry walk (_legacy.c), registered in _accel.c's method table. */
#ifndef KCOMPACT_LEGACY_H
#define KCOMPACT_LEGACY_H

#include "common.h"

extern KCOMPACT_HIDDEN const char legacy_entries_doc[];
KCOMPACT_HIDDEN PyObject *legacy_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern KCOMPACT_HIDDEN const char legacy_emit_doc[];
KCOMPACT_HIDDEN PyObject *legacy_emit(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
