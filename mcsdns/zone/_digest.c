/* The text one service's digest hashes (mcsdns/zone/journal.py `_text`, of which this
 * is the one mirror: tests/test_digest_diff.py compares the two byte for byte).
 *
 * text(head, names) -> bytes: `head`, then for each name of the dict `names` in
 * sorted order and each of its types in sorted order: a zero octet, the name, the type
 * in 2 octets (a mapping's key; a One's RRset's `rtype`), then each rdata in sorted order
 * after its length in 2 octets (big-endian).
 * A name's value is a `One` (its slot `rrset`) or a mapping of type -> RRset; an RRset
 * has `rtype` (int) and `rdatas` (a tuple of bytes). A name without records adds nothing.
 * Anything else (a type or length past 65535, an rdata not bytes) raises.
 * setup(One, RRset), once before text(): their fields are read by slot (../_slots.h).
 */
#include "../_slots.h"
#include <string.h>

static PyObject *s_rtype, *s_rdatas;
static Slots m_one, m_rrset; /* One's and RRset's slots (an RRset-like of another class: by attribute) */

typedef struct {
    char *buf;
    size_t len, cap;
} Out;

static int grow(Out *o, size_t more) {
    if (o->len + more <= o->cap)
        return 0;
    size_t cap = o->cap ? o->cap : 1024;
    while (cap < o->len + more) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *b = PyMem_Realloc(o->buf, cap);
    if (b == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->buf = b;
    o->cap = cap;
    return 0;
}

static int put(Out *o, const char *p, size_t n) {
    if (grow(o, n) < 0)
        return -1;
    memcpy(o->buf + o->len, p, n);
    o->len += n;
    return 0;
}

static int put16(Out *o, long v, const char *what) {
    if (v < 0 || v > 0xFFFF) {
        PyErr_Format(PyExc_ValueError, "%s %ld does not fit 2 octets", what, v);
        return -1;
    }
    char two[2] = {(char)(v >> 8), (char)(v & 0xFF)};
    return put(o, two, 2);
}

static int put_bytes(Out *o, PyObject *b, const char *what) {
    if (!PyBytes_Check(b)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes", what);
        return -1;
    }
    return put(o, PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b));
}

/* 0, name, type: the head of one RRset */
static int put_head(Out *o, PyObject *name, PyObject *rtype) {
    long t = PyLong_AsLong(rtype);
    if (t == -1 && PyErr_Occurred())
        return -1;
    if (put(o, "", 1) < 0 || put_bytes(o, name, "a name") < 0)
        return -1;
    return put16(o, t, "a type");
}

/* each rdata of the tuple `rds`, sorted, after its length */
static int put_rdatas(Out *o, PyObject *rds) {
    if (!PyTuple_Check(rds)) {
        PyErr_SetString(PyExc_TypeError, "rdatas must be a tuple");
        return -1;
    }
    if (PyTuple_GET_SIZE(rds) == 1) { /* most: one record, nothing to sort */
        PyObject *rd = PyTuple_GET_ITEM(rds, 0);
        if (!PyBytes_Check(rd)) {
            PyErr_SetString(PyExc_TypeError, "an rdata must be bytes");
            return -1;
        }
        return put16(o, (long)PyBytes_GET_SIZE(rd), "an rdata length") < 0 ? -1 : put_bytes(o, rd, "");
    }
    PyObject *sorted = PySequence_List(rds);
    if (sorted == NULL)
        return -1;
    int rc = PyList_Sort(sorted);
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(sorted); i++) {
        PyObject *rd = PyList_GET_ITEM(sorted, i);
        if (!PyBytes_Check(rd)) {
            PyErr_SetString(PyExc_TypeError, "an rdata must be bytes");
            rc = -1;
        } else if (put16(o, (long)PyBytes_GET_SIZE(rd), "an rdata length") < 0 || put_bytes(o, rd, "") < 0) {
            rc = -1;
        }
    }
    Py_DECREF(sorted);
    return rc;
}

/* one RRset at `name`, of type `rtype` (NULL: its own) */
static int put_rrset(Out *o, PyObject *name, PyObject *rrset, PyObject *rtype) {
    int slotted = m_rrset.type != NULL && Py_IS_TYPE(rrset, m_rrset.type);
    if (rtype == NULL) {
        rtype = slotted ? Py_XNewRef(SLOT(&m_rrset, rrset, 0)) : PyObject_GetAttr(rrset, s_rtype);
        if (rtype == NULL)
            return -1;
    } else {
        Py_INCREF(rtype);
    }
    PyObject *rds = slotted ? Py_XNewRef(SLOT(&m_rrset, rrset, 1)) : PyObject_GetAttr(rrset, s_rdatas);
    if (rds == NULL) {
        Py_DECREF(rtype);
        return -1;
    }
    int rc = put_head(o, name, rtype);
    if (rc == 0)
        rc = put_rdatas(o, rds);
    Py_DECREF(rtype);
    Py_DECREF(rds);
    return rc;
}

/* the RRsets of a mapping type -> RRset, by type */
static int put_mapping(Out *o, PyObject *name, PyObject *rrsets) {
    Py_ssize_t n = PyObject_Length(rrsets);
    if (n <= 0)
        return (int)n; /* -1: error; 0: no records */
    PyObject *types = PySequence_List(rrsets); /* iterates its keys */
    if (types == NULL)
        return -1;
    int rc = PyList_Sort(types);
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(types); i++) {
        PyObject *t = PyList_GET_ITEM(types, i);
        PyObject *rr = PyObject_GetItem(rrsets, t);
        if (rr == NULL) {
            rc = -1;
            break;
        }
        rc = put_rrset(o, name, rr, t);
        Py_DECREF(rr);
    }
    Py_DECREF(types);
    return rc;
}

static PyObject *text(PyObject *self, PyObject *args) {
    PyObject *head, *names;
    if (m_one.type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "setup() first");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "SO!:text", &head, &PyDict_Type, &names))
        return NULL;
    Out o = {NULL, 0, 0};
    PyObject *keys = PyDict_Keys(names);
    if (keys == NULL)
        return NULL;
    int rc = PyList_Sort(keys);
    if (rc == 0)
        rc = put_bytes(&o, head, "head");
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(keys); i++) {
        PyObject *name = PyList_GET_ITEM(keys, i);
        PyObject *rrsets = PyDict_GetItemWithError(names, name); /* borrowed */
        if (rrsets == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, name);
            rc = -1;
        } else if (Py_IS_TYPE(rrsets, m_one.type)) {
            PyObject *rr = Py_XNewRef(SLOT(&m_one, rrsets, 0));
            if (rr == NULL) {
                rc = -1;
            } else {
                rc = put_rrset(&o, name, rr, NULL);
                Py_DECREF(rr);
            }
        } else {
            rc = put_mapping(&o, name, rrsets);
        }
    }
    Py_DECREF(keys);
    PyObject *out = rc == 0 ? PyBytes_FromStringAndSize(o.buf ? o.buf : "", (Py_ssize_t)o.len) : NULL;
    PyMem_Free(o.buf);
    return out;
}

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *one, *rrset;
    static const char *const one_f[] = {"rrset", NULL}, *const rr_f[] = {"rtype", "rdatas", NULL};
    if (m_one.type != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "setup() is called once");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OO:setup", &one, &rrset) || slots_setup(&m_rrset, rrset, rr_f) < 0 ||
        slots_setup(&m_one, one, one_f) < 0) {
        m_one.type = m_rrset.type = NULL;
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "setup(One, RRset): read their fields by slot."},
    {"text", text, METH_VARARGS, "text(head, names) -> bytes: what a service's digest hashes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_digest", NULL, -1, methods};

PyMODINIT_FUNC PyInit__digest(void) {
    s_rtype = PyUnicode_InternFromString("rtype");
    s_rdatas = PyUnicode_InternFromString("rdatas");
    if (s_rtype == NULL || s_rdatas == NULL)
        return NULL;
    return PyModule_Create(&module);
}
