/* The layout of a kept response, `_cannedtype.Canned` (response.Canned subclasses it):
 * defined here once, read by transport/_batchio.c, which answers UDP cache hits from it.
 * bodies: None, or a tuple of bytes rotated through by rot. */
#ifndef MCSDNS_CANNEDTYPE_H
#define MCSDNS_CANNEDTYPE_H
#include <Python.h>

typedef struct {
    PyObject_HEAD
    PyObject *out, *bodies, *tail;
    Py_ssize_t hits, rot, serial_at;
} Canned;

#endif
