/* Instances of slotted Python classes (dataclass(slots=True), __slots__) read and made in
 * C: each named field's slot offset, taken once from the class's member descriptors.
 * For classes whose __init__ only sets its fields (no __post_init__): `make` is that
 * __init__ without the Python call. Shared by the extensions of the load path. */
#ifndef MCSDNS_SLOTS_H
#define MCSDNS_SLOTS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#define SLOTS_MAX 9

typedef struct {
    PyTypeObject *type;
    int n;
    Py_ssize_t offset[SLOTS_MAX];
} Slots;

/* `type`'s slots named `fields` (NULL-terminated, at most SLOTS_MAX); -1 with an error
 * if one is not an object slot */
static inline int slots_setup(Slots *m, PyObject *type, const char *const *fields) {
    if (!PyType_Check(type)) {
        PyErr_SetString(PyExc_TypeError, "setup() takes classes");
        return -1;
    }
    Py_INCREF(type);
    m->type = (PyTypeObject *)type;
    m->n = 0;
    for (int i = 0; fields[i] != NULL; i++) {
        if (i == SLOTS_MAX) {
            PyErr_SetString(PyExc_ValueError, "too many fields");
            return -1;
        }
        PyObject *d = PyObject_GetAttrString(type, fields[i]);
        if (d == NULL)
            return -1;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (ok)
            m->offset[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", m->type->tp_name, fields[i]);
            return -1;
        }
        m->n = i + 1;
    }
    return 0;
}

/* field `i` of `o`, an instance of m->type (borrowed; NULL if unset) */
#define SLOT(m, o, i) (*(PyObject **)((char *)(o) + (m)->offset[i]))

/* a new instance of m->type with its fields set to `values` (references stolen, all of
 * them, even on failure; none may be NULL) */
static inline PyObject *slots_make(Slots *m, PyObject **values) {
    PyObject *o = m->type->tp_alloc(m->type, 0);
    if (o == NULL) {
        for (int i = 0; i < m->n; i++)
            Py_XDECREF(values[i]);
        return NULL;
    }
    for (int i = 0; i < m->n; i++)
        SLOT(m, o, i) = values[i];
    return o;
}

#endif
