/* The type of a kept response (`Canned`, its layout in _cannedtype.h): the base of
 * response.Canned, so that transport/_batchio.c answers UDP cache hits from its fields
 * without calling Python. Where this is not built, _canned.py declares the same fields. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include "_cannedtype.h"

static int canned_traverse(Canned *self, visitproc visit, void *arg) {
    Py_VISIT(self->out);
    Py_VISIT(self->bodies);
    Py_VISIT(self->tail);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int canned_clear(Canned *self) {
    Py_CLEAR(self->out);
    Py_CLEAR(self->bodies);
    Py_CLEAR(self->tail);
    return 0;
}

static void canned_dealloc(Canned *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    canned_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMemberDef canned_members[] = {
    {"out", T_OBJECT, offsetof(Canned, out), 0, "the response after its ID (up to the rotating body)"},
    {"bodies", T_OBJECT, offsetof(Canned, bodies), 0, "None, or the Answer's rotations (bytes)"},
    {"tail", T_OBJECT, offsetof(Canned, tail), 0, "what follows a rotating body (its OPT record)"},
    {"hits", T_PYSSIZET, offsetof(Canned, hits), 0, "responses sent from this entry (stops at sys.maxsize)"},
    {"rot", T_PYSSIZET, offsetof(Canned, rot), 0, "index of the next body"},
    {"serial_at", T_PYSSIZET, offsetof(Canned, serial_at), 0,
     "> 0: the zone's serial goes this many octets before the response's end"},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot canned_slots[] = {
    {Py_tp_doc, "A cached response: out [+ bodies[rot] + tail], after the query's ID."},
    {Py_tp_members, canned_members},
    {Py_tp_traverse, canned_traverse},
    {Py_tp_clear, canned_clear},
    {Py_tp_dealloc, canned_dealloc},
    {0, NULL},
};

static PyType_Spec canned_spec = {"mcsdns.nameserver._cannedtype.Canned", sizeof(Canned), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, canned_slots};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cannedtype",
                                    "The type of a kept response, read in C by transport._batchio.", -1, NULL};

PyMODINIT_FUNC PyInit__cannedtype(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    PyObject *tp = PyType_FromSpec(&canned_spec);
    if (tp == NULL || PyModule_AddObjectRef(m, "Canned", tp) < 0) {
        Py_XDECREF(tp);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(tp);
    return m;
}
