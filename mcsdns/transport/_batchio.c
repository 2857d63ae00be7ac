/* Batched UDP I/O for the DNS hot path (Linux recvmmsg/sendmmsg).
 *
 * serve(fd, respond, on_error, table) reads up to BATCH datagrams with one
 * recvmmsg(MSG_DONTWAIT) and sends their answers back to their sources with
 * sendmmsg(MSG_DONTWAIT). A datagram whose bytes after the ID are a key of
 * `table` (a dict of Canned) is answered here, with no Python call: its ID,
 * then the entry's `out`, then (if `bodies` is a tuple) its next body and
 * `tail`; for a negative answer (serial_at > 0) the 4 octets of `serial` (a
 * bytearray, the zone's SOA serial) go serial_at octets before the end.
 * That is `from_cache`, the one mirror of mcsdns/nameserver/response.py `replayer`
 * (tests/transport/test_batchio_diff.py compares the two byte for byte): a change to the
 * response layout is made in both. The key is the whole query after its ID, so
 * no question end is needed here (Python's is dns.message.question_end).
 * Every other datagram is
 * answered by respond(data, False) (bytes, or None for no answer); if respond
 * raises, on_error(data, exc) is called and what it returns is sent the same
 * way (bytes, or None for no answer). It returns
 * (received, elapsed_ns, unsent): elapsed_ns is the time from the end of the
 * read to the end of the send (what each query of the batch waited in the
 * server); unsent lists (response, address) pairs the socket would not take
 * (EAGAIN), to be flushed later with send(fd, unsent), else None.
 * Addresses are raw struct sockaddr bytes, only ever handed back to send().
 * The buffers are static and shared by serve() and send(). respond(),
 * on_error() and signal handlers run Python code, which may call back in or
 * let another thread run, so `busy` admits one call at a time: any other
 * (re-entrant or from another thread) raises RuntimeError. The flag is
 * tested and set under the GIL, with no Python code in between.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "../nameserver/_cannedtype.h"
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define BATCH 64
#define BUFSIZE 65536

#define SBUFSIZE 4096 /* a cached answer, copied for sending; larger ones go through respond() */

static struct mmsghdr rmsgs[BATCH], smsgs[BATCH];
static struct iovec riov[BATCH], siov[BATCH];
static struct sockaddr_storage names[BATCH];
static char *bufs; /* BATCH * BUFSIZE, allocated at import */
static char sbufs[BATCH * SBUFSIZE];
static int busy; /* a serve() or send() is using the buffers above */

/* Take the buffers for this call, or raise RuntimeError; release with busy = 0. */
static int enter(const char *fn) {
    if (busy) {
        PyErr_Format(PyExc_RuntimeError, "%s(): another serve() or send() is running "
                     "(re-entrant or concurrent call)", fn);
        return -1;
    }
    busy = 1;
    return 0;
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static PyTypeObject *CannedType; /* nameserver._cannedtype.Canned, taken at import */

/* Copy the cached answer `v` for datagram i into sbufs[k] and point smsgs[k]
 * at it; returns 0, or -1 if `v` cannot answer it here. The mirror of
 * response.replayer: ID + out [+ bodies[rot] + tail], serial patched. */
static int from_cache(PyObject *v, int i, int k, const char *serial) {
    if (!PyObject_TypeCheck(v, CannedType)) return -1;
    Canned *c = (Canned *)v;
    if (c->out == NULL || !PyBytes_Check(c->out)) return -1;
    Py_ssize_t len = 2 + PyBytes_GET_SIZE(c->out);
    if (c->serial_at != 0 && (serial == NULL || c->serial_at < 4 || c->serial_at > len - 2)) return -1;
    PyObject *body = NULL;
    if (c->bodies != NULL && c->bodies != Py_None) {
        if (!PyTuple_Check(c->bodies) || c->tail == NULL || !PyBytes_Check(c->tail)) return -1;
        Py_ssize_t n = PyTuple_GET_SIZE(c->bodies), r = c->rot;
        if (r < 0 || r >= n) return -1;
        body = PyTuple_GET_ITEM(c->bodies, r);
        if (!PyBytes_Check(body)) return -1;
        len += PyBytes_GET_SIZE(body) + PyBytes_GET_SIZE(c->tail);
        if (len > SBUFSIZE) return -1;
        c->rot = r + 1 < n ? r + 1 : 0;
    } else if (len > SBUFSIZE) {
        return -1;
    }
    if (c->hits < PY_SSIZE_T_MAX) c->hits++; /* saturates: a signed overflow is undefined */
    char *p = sbufs + (size_t)k * SBUFSIZE;
    memcpy(p, riov[i].iov_base, 2); /* the query's ID */
    memcpy(p + 2, PyBytes_AS_STRING(c->out), (size_t)PyBytes_GET_SIZE(c->out));
    if (body != NULL) {
        char *b = p + 2 + PyBytes_GET_SIZE(c->out);
        memcpy(b, PyBytes_AS_STRING(body), (size_t)PyBytes_GET_SIZE(body));
        memcpy(b + PyBytes_GET_SIZE(body), PyBytes_AS_STRING(c->tail), (size_t)PyBytes_GET_SIZE(c->tail));
    }
    if (c->serial_at > 0) /* checked above: 4 <= serial_at <= len - 2, serial known */
        memcpy(p + len - c->serial_at, serial, 4);
    siov[k].iov_base = p;
    siov[k].iov_len = (size_t)len;
    return 0;
}

/* Send smsgs[first..n); skip messages the kernel refuses for good (e.g. an
 * unreachable address). Returns the index of the first unsent message (n if
 * all went), or -1 with a Python error set. */
static int send_all(int fd, int first, int n) {
    int off = first;
    while (off < n) {
        int r = sendmmsg(fd, smsgs + off, (unsigned)(n - off), MSG_DONTWAIT);
        if (r > 0) {
            off += r;
        } else if (r < 0 && errno == EINTR) {
            if (PyErr_CheckSignals() < 0) return -1;
        } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else {
            off++; /* this datagram cannot be sent: drop it, like sendto would */
        }
    }
    return off;
}

static PyObject *unsent_list(int *which, int from, int n) {
    PyObject *list = PyList_New(n - from);
    if (list == NULL) return NULL;
    for (int k = from; k < n; k++) {
        int i = which[k];
        PyObject *out = PyBytes_FromStringAndSize(siov[k].iov_base, (Py_ssize_t)siov[k].iov_len);
        PyObject *addr = out ? PyBytes_FromStringAndSize((const char *)&names[i], rmsgs[i].msg_hdr.msg_namelen) : NULL;
        PyObject *pair = addr ? PyTuple_Pack(2, out, addr) : NULL;
        Py_XDECREF(out);
        Py_XDECREF(addr);
        if (pair == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, k - from, pair);
    }
    return list;
}

static PyObject *serve_locked(int fd, PyObject *respond, PyObject *on_error, PyObject *table,
                              PyObject *serial_obj) {
    if (table != Py_None && !PyDict_CheckExact(table)) {
        PyErr_SetString(PyExc_TypeError, "serve(): table must be a dict or None");
        return NULL;
    }
    if (serial_obj != Py_None && !(PyByteArray_CheckExact(serial_obj) && PyByteArray_GET_SIZE(serial_obj) == 4)) {
        PyErr_SetString(PyExc_TypeError, "serve(): serial must be a bytearray of 4 octets or None");
        return NULL;
    }
    /* the zone's serial, for the negative answers of this batch */
    char serial_buf[4];
    const char *serial = NULL;
    if (serial_obj != Py_None) {
        memcpy(serial_buf, PyByteArray_AS_STRING(serial_obj), 4);
        serial = serial_buf;
    }
    for (int i = 0; i < BATCH; i++) {
        riov[i].iov_base = bufs + (size_t)i * BUFSIZE;
        riov[i].iov_len = BUFSIZE;
        rmsgs[i].msg_hdr.msg_iov = &riov[i];
        rmsgs[i].msg_hdr.msg_iovlen = 1;
        rmsgs[i].msg_hdr.msg_name = &names[i];
        rmsgs[i].msg_hdr.msg_namelen = sizeof(names[i]);
        rmsgs[i].msg_hdr.msg_control = NULL;
        rmsgs[i].msg_hdr.msg_controllen = 0;
        rmsgs[i].msg_hdr.msg_flags = 0;
    }
    int n;
    for (;;) {
        n = recvmmsg(fd, rmsgs, BATCH, MSG_DONTWAIT, NULL);
        if (n >= 0) break;
        if (errno == EINTR) {
            if (PyErr_CheckSignals() < 0) return NULL;
            continue;
        }
        /* EAGAIN, or a pending socket error (e.g. ICMP) consumed by this call: nothing read */
        return Py_BuildValue("iLO", 0, 0LL, Py_None);
    }
    long long t0 = now_ns();
    PyObject *outs[BATCH];
    int which[BATCH];
    int k = 0;
    PyObject *argv[3];
    argv[2] = Py_False;
    for (int i = 0; i < n; i++) {
        const char *q = riov[i].iov_base;
        Py_ssize_t qlen = (Py_ssize_t)rmsgs[i].msg_len;
        PyObject *out = NULL;
        if (table != Py_None && qlen > 2) {
            PyObject *key = PyBytes_FromStringAndSize(q + 2, qlen - 2);
            if (key == NULL) goto fail;
            PyObject *v = PyDict_GetItemWithError(table, key); /* borrowed */
            Py_DECREF(key);
            if (v != NULL) {
                if (from_cache(v, i, k, serial) == 0) {
                    out = Py_None; /* nothing to hold: the answer is in sbufs */
                    Py_INCREF(out);
                }
            } else if (PyErr_Occurred()) {
                goto fail;
            }
        }
        if (out == NULL) {
            PyObject *data = PyBytes_FromStringAndSize(q, qlen);
            if (data == NULL) goto fail;
            argv[1] = data;
            out = PyObject_Vectorcall(respond, argv + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            if (out == NULL) {
                /* never let one packet stop the listener: hand the error to on_error(data, exc) */
                PyObject *type, *exc, *tb;
                PyErr_Fetch(&type, &exc, &tb);
                PyErr_NormalizeException(&type, &exc, &tb);
                if (exc != NULL && tb != NULL) PyException_SetTraceback(exc, tb);
                out = PyObject_CallFunctionObjArgs(on_error, data, exc ? exc : Py_None, NULL);
                Py_XDECREF(type);
                Py_XDECREF(exc);
                Py_XDECREF(tb);
                if (out == NULL) {
                    Py_DECREF(data);
                    goto fail;
                }
            }
            Py_DECREF(data);
            if (out == Py_None) {
                Py_DECREF(out);
                continue;
            }
            if (!PyBytes_Check(out)) {
                Py_DECREF(out);
                PyErr_SetString(PyExc_TypeError, "respond() and on_error() must return bytes or None");
                goto fail;
            }
            siov[k].iov_base = PyBytes_AS_STRING(out);
            siov[k].iov_len = (size_t)PyBytes_GET_SIZE(out);
        }
        smsgs[k].msg_hdr.msg_iov = &siov[k];
        smsgs[k].msg_hdr.msg_iovlen = 1;
        smsgs[k].msg_hdr.msg_name = &names[i];
        smsgs[k].msg_hdr.msg_namelen = rmsgs[i].msg_hdr.msg_namelen;
        smsgs[k].msg_hdr.msg_control = NULL;
        smsgs[k].msg_hdr.msg_controllen = 0;
        smsgs[k].msg_hdr.msg_flags = 0;
        outs[k] = out;
        which[k] = i;
        k++;
    }
    int sent = send_all(fd, 0, k);
    if (sent < 0) goto fail;
    long long elapsed = now_ns() - t0;
    PyObject *unsent = Py_None;
    Py_INCREF(Py_None);
    if (sent < k) {
        Py_DECREF(Py_None);
        unsent = unsent_list(which, sent, k);
        if (unsent == NULL) goto fail;
    }
    for (int j = 0; j < k; j++) Py_DECREF(outs[j]);
    return Py_BuildValue("iLN", n, elapsed, unsent);
fail:
    for (int j = 0; j < k; j++) Py_DECREF(outs[j]);
    return NULL;
}

static PyObject *batch_serve(PyObject *self, PyObject *args) {
    int fd;
    PyObject *respond, *on_error, *table = Py_None, *serial_obj = Py_None;
    if (!PyArg_ParseTuple(args, "iOO|OO:serve", &fd, &respond, &on_error, &table, &serial_obj)) return NULL;
    if (enter("serve") < 0) return NULL;
    PyObject *r = serve_locked(fd, respond, on_error, table, serial_obj);
    busy = 0;
    return r;
}

/* send(fd, [(response, address), ...]) -> how many of them were sent or dropped
 * for good (the rest hit EAGAIN and must be retried). It sends from `items`, a
 * tuple copy of the list: a signal handler run on EINTR may change the list. */
static PyObject *send_locked(int fd, PyObject *items) {
    Py_ssize_t total = PyTuple_GET_SIZE(items), done = 0;
    while (done < total) {
        int k = 0;
        for (Py_ssize_t j = done; j < total && k < BATCH; j++, k++) {
            PyObject *pair = PyTuple_GET_ITEM(items, j);
            PyObject *out, *addr;
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2
                || !PyBytes_Check(out = PyTuple_GET_ITEM(pair, 0))
                || !PyBytes_Check(addr = PyTuple_GET_ITEM(pair, 1))) {
                PyErr_SetString(PyExc_TypeError, "send() takes a list of (bytes, bytes)");
                return NULL;
            }
            siov[k].iov_base = PyBytes_AS_STRING(out);
            siov[k].iov_len = (size_t)PyBytes_GET_SIZE(out);
            memset(&smsgs[k].msg_hdr, 0, sizeof(smsgs[k].msg_hdr));
            smsgs[k].msg_hdr.msg_iov = &siov[k];
            smsgs[k].msg_hdr.msg_iovlen = 1;
            smsgs[k].msg_hdr.msg_name = PyBytes_AS_STRING(addr);
            smsgs[k].msg_hdr.msg_namelen = (socklen_t)PyBytes_GET_SIZE(addr);
        }
        int sent = send_all(fd, 0, k);
        if (sent < 0) return NULL;
        done += sent;
        if (sent < k) break;
    }
    return PyLong_FromSsize_t(done);
}

static PyObject *batch_send(PyObject *self, PyObject *args) {
    int fd;
    PyObject *list;
    if (!PyArg_ParseTuple(args, "iO!:send", &fd, &PyList_Type, &list)) return NULL;
    PyObject *items = PyList_AsTuple(list);
    if (items == NULL) return NULL;
    PyObject *r = NULL;
    if (enter("send") == 0) {
        r = send_locked(fd, items);
        busy = 0;
    }
    Py_DECREF(items);
    return r;
}

static PyMethodDef methods[] = {
    {"serve", batch_serve, METH_VARARGS,
     "serve(fd, respond, on_error, table=None, serial=None) -> (received, elapsed_ns, unsent or None)"},
    {"send", batch_send, METH_VARARGS, "send(fd, [(response, address), ...]) -> number done"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_batchio",
                                    "Batched UDP I/O: recvmmsg/sendmmsg.", -1, methods};

PyMODINIT_FUNC PyInit__batchio(void) {
    if (bufs == NULL) {
        bufs = PyMem_RawMalloc((size_t)BATCH * BUFSIZE);
        if (bufs == NULL) return PyErr_NoMemory();
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (CannedType == NULL) {
        PyObject *types = PyImport_ImportModule("mcsdns.nameserver._cannedtype");
        if (types != NULL) {
            PyObject *tp = PyObject_GetAttrString(types, "Canned");
            Py_DECREF(types);
            if (tp != NULL && !PyType_Check(tp)) {
                Py_CLEAR(tp);
                PyErr_SetString(PyExc_TypeError, "mcsdns.nameserver._cannedtype.Canned is no type");
            }
            CannedType = (PyTypeObject *)tp; /* kept for the life of the process */
        }
    }
    if (CannedType == NULL || PyModule_AddIntConstant(m, "BATCH", BATCH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
