/* A JSON value decoded with only its declared fields kept (data/fields.py `Fields.keep`
 * applied while decoding: what is not kept is checked, never built).
 *
 * compile(shape) takes a shape as nested tuples: None (the value whole), ("fields",
 * ((key, shape), ...)) (of a map, the keys named; any other value whole) or ("each",
 * shape) (of a list, each item; any other value whole), and returns a capsule for
 * decode(compiled, text, pos) -> (value, end) | None: the value at text[pos] (no white
 * space before it) as json.JSONDecoder().raw_decode(text, pos) would decode it, then kept.
 * None whenever this cannot be sure of that: text that is not one-octet (Latin-1)
 * str, a kept string with an escape or a key with one, a kept number that is not an
 * integer, an integer of 32 characters or more (kept or not: json may refuse it), NaN or
 * Infinity, nesting deeper than DEPTH_MAX, the text ending before the value does, or
 * anything json would refuse. The caller then decodes with json (which raises where the
 * text is not JSON, or waits for more of it).
 * tests/test_keep_diff.py checks decode against json + `Fields.keep`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define DEPTH_MAX 64
#define CAPSULE "mcsdns.data._keep.shape"

typedef struct Shape Shape;
struct Shape {
    int kind; /* WHOLE, FIELDS, EACH */
    Py_ssize_t n; /* FIELDS: keys */
    const char **key; /* FIELDS: each key's characters (ASCII), `keylen` long */
    Py_ssize_t *keylen;
    PyObject **keyobj; /* FIELDS: each key as a str */
    Shape **sub; /* FIELDS: each key's shape; EACH: sub[0] */
};
enum { WHOLE, FIELDS, EACH };

/* ---- shapes ---- */

static void shape_free(Shape *s) {
    if (s == NULL)
        return;
    for (Py_ssize_t i = 0; i < s->n || (s->kind == EACH && i < 1); i++) {
        if (s->sub != NULL)
            shape_free(s->sub[i]);
        if (s->keyobj != NULL)
            Py_XDECREF(s->keyobj[i]);
    }
    PyMem_Free(s->key);
    PyMem_Free(s->keylen);
    PyMem_Free(s->keyobj);
    PyMem_Free(s->sub);
    PyMem_Free(s);
}

static Shape *shape_new(PyObject *t, int depth) {
    Shape *s = PyMem_Calloc(1, sizeof(Shape));
    if (s == NULL)
        return (Shape *)PyErr_NoMemory();
    if (t == Py_None) {
        s->kind = WHOLE;
        return s;
    }
    if (depth > DEPTH_MAX || !PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 2 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(t, 0)))
        goto bad;
    PyObject *tag = PyTuple_GET_ITEM(t, 0), *arg = PyTuple_GET_ITEM(t, 1);
    if (PyUnicode_CompareWithASCIIString(tag, "each") == 0) {
        s->kind = EACH;
        s->sub = PyMem_Calloc(1, sizeof(Shape *));
        if (s->sub == NULL || (s->sub[0] = shape_new(arg, depth + 1)) == NULL)
            goto fail;
        return s;
    }
    if (PyUnicode_CompareWithASCIIString(tag, "fields") != 0 || !PyTuple_Check(arg))
        goto bad;
    s->kind = FIELDS;
    Py_ssize_t n = PyTuple_GET_SIZE(arg);
    s->key = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    s->keylen = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
    s->keyobj = PyMem_Calloc((size_t)n + 1, sizeof(PyObject *));
    s->sub = PyMem_Calloc((size_t)n + 1, sizeof(Shape *));
    if (s->key == NULL || s->keylen == NULL || s->keyobj == NULL || s->sub == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(arg, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0)) ||
            !PyUnicode_IS_ASCII(PyTuple_GET_ITEM(pair, 0)))
            goto bad;
        PyObject *key = PyTuple_GET_ITEM(pair, 0);
        s->n = i + 1; /* freed from here on */
        Py_INCREF(key);
        s->keyobj[i] = key;
        s->key[i] = (const char *)PyUnicode_1BYTE_DATA(key);
        s->keylen[i] = PyUnicode_GET_LENGTH(key);
        if ((s->sub[i] = shape_new(PyTuple_GET_ITEM(pair, 1), depth + 1)) == NULL)
            goto fail;
    }
    return s;
bad:
    PyErr_SetString(PyExc_ValueError, "a shape is None, (\"fields\", ((key, shape), ...)) or (\"each\", shape)");
fail:
    shape_free(s);
    return NULL;
}

static void capsule_free(PyObject *cap) {
    shape_free(PyCapsule_GetPointer(cap, CAPSULE));
}

static PyObject *compile(PyObject *self, PyObject *shape) {
    Shape *s = shape_new(shape, 0);
    if (s == NULL)
        return NULL;
    PyObject *cap = PyCapsule_New(s, CAPSULE, capsule_free);
    if (cap == NULL)
        shape_free(s);
    return cap;
}

/* ---- decoding ---- */

typedef struct {
    const unsigned char *p; /* the text */
    Py_ssize_t n, i; /* its length, the position */
} Text;

/* Each returns 1 (done), 0 (not sure: decline; no exception) or -1 (an error, set). */

static void ws(Text *t) {
    while (t->i < t->n) {
        unsigned char c = t->p[t->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            return;
        t->i++;
    }
}

static int hex(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* a string at its opening quote: [start, end) of its characters, and whether it has escapes */
static int string(Text *t, Py_ssize_t *start, Py_ssize_t *end, int *escaped) {
    Py_ssize_t i = t->i + 1;
    *escaped = 0;
    *start = i;
    while (i < t->n) {
        unsigned char c = t->p[i];
        if (c == '"') {
            *end = i;
            t->i = i + 1;
            return 1;
        }
        if (c < 0x20)
            return 0; /* json (strict) refuses control characters */
        if (c == '\\') {
            *escaped = 1;
            if (i + 1 >= t->n)
                return 0;
            unsigned char e = t->p[i + 1];
            if (e == 'u') {
                if (i + 5 >= t->n || !hex(t->p[i + 2]) || !hex(t->p[i + 3]) || !hex(t->p[i + 4]) ||
                    !hex(t->p[i + 5]))
                    return 0;
                i += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == 0)
                return 0;
            i += 2;
            continue;
        }
        i++;
    }
    return 0;
}

static int digits(Text *t) {
    Py_ssize_t from = t->i;
    while (t->i < t->n && t->p[t->i] >= '0' && t->p[t->i] <= '9')
        t->i++;
    return t->i > from;
}

/* a number: whether it is an integer (no fraction, no exponent) */
static int number(Text *t, int *integer) {
    if (t->p[t->i] == '-')
        t->i++;
    if (t->i >= t->n)
        return 0;
    if (t->p[t->i] == '0')
        t->i++;
    else if (!digits(t))
        return 0;
    *integer = 1;
    if (t->i < t->n && t->p[t->i] == '.') {
        t->i++;
        if (!digits(t))
            return 0;
        *integer = 0;
    }
    if (t->i < t->n && (t->p[t->i] == 'e' || t->p[t->i] == 'E')) {
        t->i++;
        if (t->i < t->n && (t->p[t->i] == '+' || t->p[t->i] == '-'))
            t->i++;
        if (!digits(t))
            return 0;
        *integer = 0;
    }
    return t->i < t->n; /* at the end of the text a number may go on */
}

static int literal(Text *t, const char *word) {
    size_t len = strlen(word);
    if ((size_t)(t->n - t->i) < len || memcmp(t->p + t->i, word, len) != 0)
        return 0;
    t->i += (Py_ssize_t)len;
    return 1;
}

static int value(Text *t, Shape *s, int depth, PyObject **out);

/* an object or array at its opening bracket, decoded (`s` FIELDS: only its keys) or only
 * checked (out NULL) */
static int object(Text *t, Shape *s, int depth, PyObject **out) {
    PyObject *d = NULL;
    if (out != NULL && (d = PyDict_New()) == NULL)
        return -1;
    t->i++;
    ws(t);
    if (t->i < t->n && t->p[t->i] == '}') {
        t->i++;
        if (out != NULL)
            *out = d;
        return 1;
    }
    while (t->i < t->n) {
        if (t->p[t->i] != '"')
            goto decline;
        Py_ssize_t ks, ke;
        int esc, rc;
        if (string(t, &ks, &ke, &esc) != 1)
            goto decline;
        ws(t);
        if (t->i >= t->n || t->p[t->i] != ':')
            goto decline;
        t->i++;
        ws(t);
        if (out == NULL) {
            rc = value(t, NULL, depth + 1, NULL);
        } else if (esc) {
            goto decline; /* a key with an escape: json decodes it */
        } else if (s == NULL) { /* whole: every key */
            PyObject *key = PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, t->p + ks, ke - ks), *v = NULL;
            if (key == NULL)
                goto fail;
            rc = value(t, NULL, depth + 1, &v);
            if (rc == 1 && PyDict_SetItem(d, key, v) < 0)
                rc = -1;
            Py_DECREF(key);
            Py_XDECREF(v);
        } else {
            Py_ssize_t k = 0;
            while (k < s->n && !(s->keylen[k] == ke - ks && memcmp(s->key[k], t->p + ks, (size_t)(ke - ks)) == 0))
                k++;
            if (k == s->n) {
                rc = value(t, NULL, depth + 1, NULL); /* not kept: checked */
            } else {
                PyObject *v = NULL;
                rc = value(t, s->sub[k], depth + 1, &v);
                if (rc == 1 && PyDict_SetItem(d, s->keyobj[k], v) < 0)
                    rc = -1;
                Py_XDECREF(v);
            }
        }
        if (rc < 0)
            goto fail;
        if (rc == 0)
            goto decline;
        ws(t);
        if (t->i >= t->n)
            goto decline;
        if (t->p[t->i] == '}') {
            t->i++;
            if (out != NULL)
                *out = d;
            return 1;
        }
        if (t->p[t->i] != ',')
            goto decline;
        t->i++;
        ws(t);
    }
decline:
    Py_XDECREF(d);
    return 0;
fail:
    Py_XDECREF(d);
    return -1;
}

static int array(Text *t, Shape *item, int depth, PyObject **out) {
    PyObject *l = NULL;
    if (out != NULL && (l = PyList_New(0)) == NULL)
        return -1;
    t->i++;
    ws(t);
    if (t->i < t->n && t->p[t->i] == ']') {
        t->i++;
        if (out != NULL)
            *out = l;
        return 1;
    }
    while (t->i < t->n) {
        PyObject *v = NULL;
        int rc = value(t, item, depth + 1, out != NULL ? &v : NULL);
        if (rc == 1 && v != NULL) {
            rc = PyList_Append(l, v) < 0 ? -1 : 1;
            Py_DECREF(v);
        }
        if (rc < 0) {
            Py_XDECREF(l);
            return -1;
        }
        if (rc == 0)
            break;
        ws(t);
        if (t->i >= t->n)
            break;
        if (t->p[t->i] == ']') {
            t->i++;
            if (out != NULL)
                *out = l;
            return 1;
        }
        if (t->p[t->i] != ',')
            break;
        t->i++;
        ws(t);
    }
    Py_XDECREF(l);
    return 0;
}

/* the value at t->i, decoded as `s` keeps it (NULL: whole) into *out, or checked (out NULL) */
static int value(Text *t, Shape *s, int depth, PyObject **out) {
    if (depth > DEPTH_MAX || t->i >= t->n)
        return 0;
    unsigned char c = t->p[t->i];
    if (c == '{')
        return object(t, s != NULL && s->kind == FIELDS ? s : NULL, depth, out);
    if (c == '[')
        return array(t, s != NULL && s->kind == EACH ? s->sub[0] : NULL, depth, out);
    if (c == '"') {
        Py_ssize_t start, end;
        int esc;
        if (string(t, &start, &end, &esc) != 1)
            return 0;
        if (out == NULL)
            return 1;
        if (esc)
            return 0;
        *out = PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, t->p + start, end - start);
        return *out == NULL ? -1 : 1;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        Py_ssize_t start = t->i;
        int integer;
        if (!number(t, &integer))
            return 0;
        char buf[32];
        Py_ssize_t len = t->i - start;
        if (integer && len >= (Py_ssize_t)sizeof buf)
            return 0; /* a long integer, kept or not: json decodes it (or refuses it) */
        if (out == NULL)
            return 1;
        if (!integer)
            return 0;
        memcpy(buf, t->p + start, (size_t)len);
        buf[len] = 0;
        *out = PyLong_FromString(buf, NULL, 10);
        return *out == NULL ? -1 : 1;
    }
    PyObject *lit = NULL;
    if (literal(t, "true"))
        lit = Py_True;
    else if (literal(t, "false"))
        lit = Py_False;
    else if (literal(t, "null"))
        lit = Py_None;
    else
        return 0; /* NaN, Infinity or not JSON */
    if (out != NULL)
        *out = Py_NewRef(lit);
    return 1;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    PyObject *text, *cap;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "OUn:decode", &cap, &text, &pos))
        return NULL;
    Shape *s = PyCapsule_GetPointer(cap, CAPSULE);
    if (s == NULL)
        return NULL;
    if (PyUnicode_KIND(text) != PyUnicode_1BYTE_KIND || pos < 0 || pos >= PyUnicode_GET_LENGTH(text))
        Py_RETURN_NONE;
    Text t = {PyUnicode_1BYTE_DATA(text), PyUnicode_GET_LENGTH(text), pos};
    PyObject *v = NULL;
    int rc = value(&t, s->kind == WHOLE ? NULL : s, 0, &v);
    if (rc < 0)
        return NULL;
    if (rc == 0)
        Py_RETURN_NONE;
    PyObject *out = Py_BuildValue("(Nn)", v, t.i);
    return out;
}

static PyMethodDef methods[] = {
    {"compile", compile, METH_O, "compile(shape) -> a compiled shape for decode()."},
    {"decode", decode, METH_VARARGS, "decode(compiled, text, pos) -> (value kept, end) | None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_keep", NULL, -1, methods};

PyMODINIT_FUNC PyInit__keep(void) {
    return PyModule_Create(&module);
}
