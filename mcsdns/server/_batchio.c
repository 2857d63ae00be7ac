/* Batched UDP I/O for the DNS hot path (Linux recvmmsg/sendmmsg).
 *
 * serve(fd, respond, on_error) reads up to BATCH datagrams with one
 * recvmmsg(MSG_DONTWAIT), calls respond(data, False) for each, and sends the
 * answers back to their sources with sendmmsg(MSG_DONTWAIT). It returns
 * (received, elapsed_ns, unsent): elapsed_ns is the time from the end of the
 * read to the end of the send (what each query of the batch waited in the
 * server); unsent lists (response, address) pairs the socket would not take
 * (EAGAIN), to be flushed later with send(fd, unsent), else None.
 * Addresses are raw struct sockaddr bytes, only ever handed back to send().
 * The buffers are static: the functions hold the GIL throughout and never
 * block, so calls cannot interleave.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define BATCH 64
#define BUFSIZE 65536

static struct mmsghdr rmsgs[BATCH], smsgs[BATCH];
static struct iovec riov[BATCH], siov[BATCH];
static struct sockaddr_storage names[BATCH];
static char *bufs; /* BATCH * BUFSIZE, allocated at import */

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
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

static PyObject *unsent_list(PyObject **outs, int *which, int from, int n) {
    PyObject *list = PyList_New(n - from);
    if (list == NULL) return NULL;
    for (int k = from; k < n; k++) {
        int i = which[k];
        PyObject *addr = PyBytes_FromStringAndSize((const char *)&names[i], rmsgs[i].msg_hdr.msg_namelen);
        PyObject *pair = addr ? PyTuple_Pack(2, outs[k], addr) : NULL;
        Py_XDECREF(addr);
        if (pair == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, k - from, pair);
    }
    return list;
}

static PyObject *batch_serve(PyObject *self, PyObject *args) {
    int fd;
    PyObject *respond, *on_error;
    if (!PyArg_ParseTuple(args, "iOO:serve", &fd, &respond, &on_error)) return NULL;
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
        if (errno == EAGAIN || errno == EWOULDBLOCK) return Py_BuildValue("iLO", 0, 0LL, Py_None);
        /* a pending socket error (e.g. ICMP) is consumed by this call: report nothing read */
        return Py_BuildValue("iLO", 0, 0LL, Py_None);
    }
    long long t0 = now_ns();
    PyObject *outs[BATCH];
    int which[BATCH];
    int k = 0;
    PyObject *argv[3];
    argv[2] = Py_False;
    for (int i = 0; i < n; i++) {
        PyObject *data = PyBytes_FromStringAndSize(riov[i].iov_base, rmsgs[i].msg_len);
        if (data == NULL) goto fail;
        argv[1] = data;
        PyObject *out = PyObject_Vectorcall(respond, argv + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (out == NULL) {
            /* never let one packet stop the listener: hand the error to on_error(data, exc) */
            PyObject *type, *exc, *tb;
            PyErr_Fetch(&type, &exc, &tb);
            PyErr_NormalizeException(&type, &exc, &tb);
            if (exc != NULL && tb != NULL) PyException_SetTraceback(exc, tb);
            PyObject *r = PyObject_CallFunctionObjArgs(on_error, data, exc ? exc : Py_None, NULL);
            Py_XDECREF(type);
            Py_XDECREF(exc);
            Py_XDECREF(tb);
            Py_DECREF(data);
            if (r == NULL) goto fail;
            Py_DECREF(r);
            continue;
        }
        Py_DECREF(data);
        if (out == Py_None) {
            Py_DECREF(out);
            continue;
        }
        if (!PyBytes_Check(out)) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_TypeError, "respond() must return bytes or None");
            goto fail;
        }
        siov[k].iov_base = PyBytes_AS_STRING(out);
        siov[k].iov_len = (size_t)PyBytes_GET_SIZE(out);
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
        unsent = unsent_list(outs, which, sent, k);
        if (unsent == NULL) goto fail;
    }
    for (int j = 0; j < k; j++) Py_DECREF(outs[j]);
    PyObject *res = Py_BuildValue("iLN", n, elapsed, unsent);
    return res;
fail:
    for (int j = 0; j < k; j++) Py_DECREF(outs[j]);
    return NULL;
}

/* send(fd, [(response, address), ...]) -> how many of them were sent or dropped
 * for good (the rest hit EAGAIN and must be retried). */
static PyObject *batch_send(PyObject *self, PyObject *args) {
    int fd;
    PyObject *list;
    if (!PyArg_ParseTuple(args, "iO!:send", &fd, &PyList_Type, &list)) return NULL;
    Py_ssize_t total = PyList_GET_SIZE(list), done = 0;
    while (done < total) {
        int k = 0;
        for (Py_ssize_t j = done; j < total && k < BATCH; j++, k++) {
            PyObject *pair = PyList_GET_ITEM(list, j);
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

static PyMethodDef methods[] = {
    {"serve", batch_serve, METH_VARARGS,
     "serve(fd, respond, on_error) -> (received, elapsed_ns, unsent or None)"},
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
    if (m != NULL && PyModule_AddIntConstant(m, "BATCH", BATCH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
