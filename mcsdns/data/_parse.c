/* The common case of parsing a raw ServiceImport or EndpointSlice, in C.
 *
 * service_import(obj) and endpoint_slice(obj) return the model that
 * mcsdns/data/objects.py's `ServiceImport.parse` / `EndpointSlice.parse` returns for
 * a decoded object `obj`, or None whenever the object is anything but plain and valid:
 * a value of an unexpected type or outside ASCII, a malformed or missing field, an
 * endpoint with other than one address, more than IPS_MAX ClusterSetIPs, anything
 * that would be dropped with a reason. The Python parser then parses it, so it stays
 * the one definition of every rule and message; this is its mirror for the objects
 * nearly all lists hold (tests/test_parse_diff.py checks that the two agree).
 *
 * setup(ServiceImport, EndpointSlice, Endpoint, Port, service_label, cluster_label) is
 * called once: the models are slotted dataclasses without __post_init__, made here as
 * ../_slots.h makes them (what their generated __init__ does).
 */
#include "../_slots.h"
#include <arpa/inet.h>
#include <string.h>

#define IPS_MAX 8 /* ClusterSetIPs handled here (distinct kept in order: quadratic) */
#define ADDR_TEXT_MAX 64 /* longer address text is not an address */

static Slots m_si, m_es, m_ep, m_port;
static PyObject *s_service_label, *s_cluster_label, *s_empty, *s_tcp, *s_udp, *s_sctp, *s_default;
static PyObject *s_metadata, *s_namespace, *s_name, *s_labels, *s_spec, *s_type, *s_ips, *s_ports;
static PyObject *s_port, *s_protocol, *s_address_type, *s_endpoints, *s_addresses, *s_hostname;
static PyObject *s_conditions, *s_ready, *s_serving, *s_terminating, *s_zone, *s_ipv4, *s_ipv6;
static PyObject *s_clustersetip, *s_headless;
static int ready_done;

#define FALLBACK NULL /* returned with no exception set: the Python parser decides */

/* ---- values ---- */

/* the item `key` (an interned str: no error) of dict `d` (borrowed), NULL when absent */
static PyObject *get(PyObject *d, PyObject *key) {
    return PyDict_GetItemWithError(d, key);
}

/* `v` is present and true (an error in its __bool__, which no decoded value has: false) */
static int truthy(PyObject *v) {
    if (v == NULL || v == Py_None)
        return 0;
    int t = PyObject_IsTrue(v);
    if (t < 0)
        PyErr_Clear();
    return t == 1;
}

/* an exact ASCII str: its characters and length */
static const char *ascii(PyObject *v, Py_ssize_t *n) {
    if (v == NULL || !PyUnicode_CheckExact(v) || !PyUnicode_IS_ASCII(v))
        return NULL;
    *n = PyUnicode_GET_LENGTH(v);
    return (const char *)PyUnicode_1BYTE_DATA(v);
}

static int alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* RFC 1123 label (kube.names.is_dns_label) of s[0:n] */
static int label(const char *s, Py_ssize_t n) {
    if (n < 1 || n > 63 || !alnum(s[0]) || !alnum(s[n - 1]))
        return 0;
    for (Py_ssize_t i = 1; i < n - 1; i++)
        if (!alnum(s[i]) && s[i] != '-')
            return 0;
    return 1;
}

static int has_upper(const char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] >= 'A' && s[i] <= 'Z')
            return 1;
    return 0;
}

/* `v` lowercased (a new reference; `v` itself when it has no capitals) */
static PyObject *lower(PyObject *v, const char *s, Py_ssize_t n) {
    if (!has_upper(s, n)) {
        Py_INCREF(v);
        return v;
    }
    PyObject *out = PyUnicode_New(n, 127);
    if (out == NULL)
        return NULL;
    char *d = (char *)PyUnicode_1BYTE_DATA(out);
    for (Py_ssize_t i = 0; i < n; i++)
        d[i] = (s[i] >= 'A' && s[i] <= 'Z') ? (char)(s[i] + 32) : s[i];
    return out;
}

/* a str whose lowercase is a DNS label: that lowercase (new reference), else FALLBACK */
static PyObject *lower_label(PyObject *v) {
    Py_ssize_t n;
    const char *s = ascii(v, &n);
    if (s == NULL)
        return FALLBACK;
    PyObject *low = lower(v, s, n);
    if (low == NULL)
        return NULL;
    if (!label((const char *)PyUnicode_1BYTE_DATA(low), n)) {
        Py_DECREF(low);
        return FALLBACK;
    }
    return low;
}

/* a str that is a DNS label as it is */
static int is_label(PyObject *v) {
    Py_ssize_t n;
    const char *s = ascii(v, &n);
    return s != NULL && label(s, n);
}

/* an address in text, packed (new bytes), else FALLBACK; `v6`: -1 either family, else
 * the one required */
static PyObject *packed(PyObject *v, int v6) {
    Py_ssize_t n;
    const char *s = ascii(v, &n);
    if (s == NULL || n >= ADDR_TEXT_MAX || (Py_ssize_t)strlen(s) != n)
        return FALLBACK;
    unsigned char buf[16];
    int six = memchr(s, ':', (size_t)n) != NULL;
    if (inet_pton(six ? AF_INET6 : AF_INET, s, buf) != 1 || (v6 >= 0 && six != v6))
        return FALLBACK;
    return PyBytes_FromStringAndSize((const char *)buf, six ? 16 : 4);
}

/* ---- parts ---- */

/* metadata: namespace and name (borrowed) and the labels (borrowed, NULL for none) */
static int meta(PyObject *obj, PyObject **ns, PyObject **name, PyObject **labels) {
    PyObject *md = get(obj, s_metadata);
    if (md == NULL || !PyDict_CheckExact(md))
        return 0;
    *ns = get(md, s_namespace);
    if (*ns == NULL)
        *ns = s_default;
    *name = get(md, s_name);
    if (*name == NULL || !PyUnicode_CheckExact(*name) || !PyUnicode_CheckExact(*ns))
        return 0;
    PyObject *l = get(md, s_labels);
    *labels = truthy(l) ? l : NULL;
    return *labels == NULL || PyDict_CheckExact(*labels);
}

/* the ports of a `ports` value: a new tuple of Port, else FALLBACK */
static PyObject *ports(PyObject *raw) {
    if (raw == NULL || raw == Py_None)
        return PyTuple_New(0);
    if (!PyList_CheckExact(raw))
        return FALLBACK;
    Py_ssize_t n = PyList_GET_SIZE(raw);
    PyObject *out = PyTuple_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *p = PyList_GET_ITEM(raw, i);
        if (!PyDict_CheckExact(p))
            goto fallback;
        PyObject *num = get(p, s_port), *name = get(p, s_name), *proto = get(p, s_protocol);
        if (num == NULL || !PyLong_CheckExact(num))
            goto fallback;
        long port = PyLong_AsLong(num);
        if (port == -1 && PyErr_Occurred()) {
            PyErr_Clear(); /* too large for a long: not a port */
            goto fallback;
        }
        if (port < 0 || port > 65535)
            goto fallback;
        PyObject *pname;
        if (truthy(name)) {
            pname = lower_label(name);
            if (pname == NULL)
                goto fail_or_fallback;
        } else if (name == NULL || name == Py_None || (PyUnicode_CheckExact(name))) {
            pname = Py_NewRef(s_empty); /* "" (a falsy str) or no name */
        } else {
            goto fallback; /* a falsy value that is not a str: "" in Python, but rare */
        }
        PyObject *pr;
        if (!truthy(proto))
            pr = s_tcp;
        else if (PyUnicode_CheckExact(proto) &&
                 (PyUnicode_Compare(proto, s_tcp) == 0 || PyUnicode_Compare(proto, s_udp) == 0 ||
                  PyUnicode_Compare(proto, s_sctp) == 0))
            pr = proto;
        else {
            Py_DECREF(pname);
            goto fallback;
        }
        PyObject *vals[3] = {pname, Py_NewRef(pr), Py_NewRef(num)};
        PyObject *port_obj = slots_make(&m_port, vals);
        if (port_obj == NULL)
            goto fail;
        PyTuple_SET_ITEM(out, i, port_obj);
    }
    return out;
fail_or_fallback:
    if (PyErr_Occurred())
        goto fail;
fallback:
    Py_DECREF(out);
    return FALLBACK;
fail:
    Py_DECREF(out);
    return NULL;
}

/* ---- ServiceImport ---- */

static PyObject *service_import_(PyObject *obj) {
    PyObject *ns, *name, *labels;
    if (!meta(obj, &ns, &name, &labels) || !is_label(ns) || !is_label(name))
        return FALLBACK;
    PyObject *spec = get(obj, s_spec);
    if (spec == NULL || !PyDict_CheckExact(spec))
        return FALLBACK;
    PyObject *typ = get(spec, s_type);
    if (typ == NULL || !PyUnicode_CheckExact(typ))
        return FALLBACK;
    int headless;
    if (PyUnicode_Compare(typ, s_clustersetip) == 0)
        headless = 0;
    else if (PyUnicode_Compare(typ, s_headless) == 0)
        headless = 1;
    else
        return FALLBACK;
    PyObject *raw_ips = get(spec, s_ips);
    Py_ssize_t n = 0;
    if (truthy(raw_ips)) {
        if (!PyList_CheckExact(raw_ips))
            return FALLBACK;
        n = PyList_GET_SIZE(raw_ips);
    }
    if (headless)
        n = 0;
    if (n > IPS_MAX)
        return FALLBACK;
    PyObject *ips[IPS_MAX];
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *p = packed(PyList_GET_ITEM(raw_ips, i), -1);
        if (p == NULL) {
            for (Py_ssize_t j = 0; j < kept; j++)
                Py_DECREF(ips[j]);
            return NULL; /* FALLBACK, or an error */
        }
        int seen = 0;
        for (Py_ssize_t j = 0; j < kept && !seen; j++)
            seen = PyBytes_GET_SIZE(ips[j]) == PyBytes_GET_SIZE(p) &&
                   memcmp(PyBytes_AS_STRING(ips[j]), PyBytes_AS_STRING(p), (size_t)PyBytes_GET_SIZE(p)) == 0;
        if (seen)
            Py_DECREF(p);
        else
            ips[kept++] = p;
    }
    PyObject *ip_tuple = PyTuple_New(kept);
    if (ip_tuple == NULL) {
        for (Py_ssize_t j = 0; j < kept; j++)
            Py_DECREF(ips[j]);
        return NULL;
    }
    for (Py_ssize_t j = 0; j < kept; j++)
        PyTuple_SET_ITEM(ip_tuple, j, ips[j]);
    PyObject *port_tuple = ports(get(spec, s_ports));
    if (port_tuple == NULL) {
        Py_DECREF(ip_tuple);
        return NULL;
    }
    /* namespace, name, headless, ips, ports */
    PyObject *vals[5] = {Py_NewRef(ns), Py_NewRef(name), PyBool_FromLong(headless), ip_tuple, port_tuple};
    return slots_make(&m_si, vals);
}

/* ---- EndpointSlice ---- */

/* `<first address, dashed>` (objects._dashed) of a packed address */
static PyObject *dashed(PyObject *addr) {
    char text[INET6_ADDRSTRLEN];
    int six = PyBytes_GET_SIZE(addr) == 16;
    if (inet_ntop(six ? AF_INET6 : AF_INET, PyBytes_AS_STRING(addr), text, sizeof text) == NULL)
        return FALLBACK;
    for (char *c = text; *c; c++)
        if (*c == '.' || *c == ':')
            *c = '-';
    return PyUnicode_FromString(text);
}

/* conditions: ready, serving, terminating (objects.Endpoint.parse), 0 for FALLBACK */
static int conditions(PyObject *ep, int *ready, int *serving, int *terminating) {
    PyObject *c = get(ep, s_conditions);
    if (!truthy(c)) {
        *ready = *serving = 1;
        *terminating = 0;
        return 1;
    }
    if (!PyDict_CheckExact(c))
        return 0;
    PyObject *r = get(c, s_ready), *s = get(c, s_serving), *t = get(c, s_terminating);
    *ready = r == NULL || r == Py_None || r == Py_True;
    *serving = (s == NULL || s == Py_None) ? *ready : s == Py_True;
    *terminating = t == Py_True;
    return 1;
}

static PyObject *endpoint(PyObject *ep, int v6) {
    if (!PyDict_CheckExact(ep))
        return FALLBACK;
    PyObject *raw = get(ep, s_addresses);
    if (raw == NULL || !PyList_CheckExact(raw) || PyList_GET_SIZE(raw) != 1)
        return FALLBACK;
    int ready, serving, terminating;
    if (!conditions(ep, &ready, &serving, &terminating))
        return FALLBACK;
    PyObject *addr = packed(PyList_GET_ITEM(raw, 0), v6);
    if (addr == NULL)
        return NULL;
    PyObject *addrs = PyTuple_Pack(1, addr);
    Py_DECREF(addr);
    if (addrs == NULL)
        return NULL;
    PyObject *h = get(ep, s_hostname);
    PyObject *host = truthy(h) ? lower_label(h) : dashed(PyTuple_GET_ITEM(addrs, 0));
    if (host == NULL) {
        Py_DECREF(addrs);
        return NULL;
    }
    PyObject *z = get(ep, s_zone), *zone = s_empty; /* none, or not a str: "" */
    if (truthy(z) && PyUnicode_Check(z)) {
        if (!PyUnicode_CheckExact(z)) {
            Py_DECREF(addrs);
            Py_DECREF(host);
            return FALLBACK;
        }
        zone = z;
    }
    /* addresses, hostname, ready, serving, terminating, zone */
    PyObject *vals[6] = {addrs, host, PyBool_FromLong(ready), PyBool_FromLong(serving),
                         PyBool_FromLong(terminating), Py_NewRef(zone)};
    return slots_make(&m_ep, vals);
}

static PyObject *endpoint_slice_(PyObject *obj) {
    PyObject *ns, *name, *labels;
    if (!meta(obj, &ns, &name, &labels) || labels == NULL)
        return FALLBACK;
    PyObject *svc = get(labels, s_service_label), *cluster = get(labels, s_cluster_label);
    if (svc == NULL || !is_label(svc) || cluster == NULL || !is_label(ns))
        return FALLBACK;
    /* the cluster ID, lowercased: one label, or two joined by a dot */
    Py_ssize_t cn;
    const char *cs = ascii(cluster, &cn);
    if (cs == NULL)
        return FALLBACK;
    PyObject *cid = lower(cluster, cs, cn);
    if (cid == NULL)
        return NULL;
    const char *c = (const char *)PyUnicode_1BYTE_DATA(cid);
    const char *dot = memchr(c, '.', (size_t)cn);
    int ok = dot == NULL ? label(c, cn)
                         : label(c, dot - c) && label(dot + 1, cn - (dot - c) - 1);
    PyObject *family = get(obj, s_address_type);
    int v6 = 0;
    if (family != NULL && PyUnicode_CheckExact(family) && PyUnicode_Compare(family, s_ipv6) == 0)
        v6 = 1;
    else if (family != NULL && !(PyUnicode_CheckExact(family) && PyUnicode_Compare(family, s_ipv4) == 0))
        ok = 0;
    PyObject *raw_eps = get(obj, s_endpoints);
    Py_ssize_t n = 0;
    if (truthy(raw_eps)) {
        if (!PyList_CheckExact(raw_eps))
            ok = 0;
        else
            n = PyList_GET_SIZE(raw_eps);
    }
    if (!ok) {
        Py_DECREF(cid);
        return FALLBACK;
    }
    PyObject *eps = PyTuple_New(n);
    if (eps == NULL) {
        Py_DECREF(cid);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = endpoint(PyList_GET_ITEM(raw_eps, i), v6);
        if (e == NULL) {
            Py_DECREF(eps);
            Py_DECREF(cid);
            return NULL; /* FALLBACK (the Python parser says why), or an error */
        }
        PyTuple_SET_ITEM(eps, i, e);
    }
    PyObject *port_tuple = ports(get(obj, s_ports));
    if (port_tuple == NULL) {
        Py_DECREF(eps);
        Py_DECREF(cid);
        return NULL;
    }
    /* namespace, name, service, cluster, ipv6, endpoints, ports, dropped, n_dropped */
    PyObject *vals[9] = {Py_NewRef(ns), Py_NewRef(name), Py_NewRef(svc), cid, PyBool_FromLong(v6), eps,
                         port_tuple, PyTuple_New(0), PyLong_FromLong(0)};
    if (vals[7] == NULL || vals[8] == NULL) {
        for (int i = 0; i < 9; i++)
            Py_XDECREF(vals[i]);
        return NULL;
    }
    return slots_make(&m_es, vals);
}

/* ---- module ---- */

static PyObject *result(PyObject *model) {
    if (model != NULL || PyErr_Occurred())
        return model;
    Py_RETURN_NONE;
}

static PyObject *service_import(PyObject *self, PyObject *obj) {
    if (!ready_done) {
        PyErr_SetString(PyExc_RuntimeError, "setup() first");
        return NULL;
    }
    return result(PyDict_CheckExact(obj) ? service_import_(obj) : FALLBACK);
}

static PyObject *endpoint_slice(PyObject *self, PyObject *obj) {
    if (!ready_done) {
        PyErr_SetString(PyExc_RuntimeError, "setup() first");
        return NULL;
    }
    return result(PyDict_CheckExact(obj) ? endpoint_slice_(obj) : FALLBACK);
}

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *si, *es, *ep, *port;
    if (ready_done) {
        PyErr_SetString(PyExc_RuntimeError, "setup() is called once");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOOOUU:setup", &si, &es, &ep, &port, &s_service_label, &s_cluster_label))
        return NULL;
    static const char *const si_f[] = {"namespace", "name", "headless", "ips", "ports", NULL};
    static const char *const es_f[] = {"namespace", "name", "service", "cluster", "ipv6", "endpoints",
                                       "ports", "dropped", "n_dropped", NULL};
    static const char *const ep_f[] = {"addresses", "hostname", "ready", "serving", "terminating", "zone",
                                       NULL};
    static const char *const port_f[] = {"name", "protocol", "port", NULL};
    if (slots_setup(&m_si, si, si_f) < 0 || slots_setup(&m_es, es, es_f) < 0 ||
        slots_setup(&m_ep, ep, ep_f) < 0 || slots_setup(&m_port, port, port_f) < 0)
        return NULL;
    Py_INCREF(s_service_label);
    Py_INCREF(s_cluster_label);
    ready_done = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "setup(ServiceImport, EndpointSlice, Endpoint, Port, service_label, "
                                   "cluster_label): the models to make."},
    {"service_import", service_import, METH_O, "The ServiceImport model of a plain valid object, else None."},
    {"endpoint_slice", endpoint_slice, METH_O, "The EndpointSlice model of a plain valid object, else None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_parse", NULL, -1, methods};

static int intern(PyObject **slot, const char *s) {
    *slot = PyUnicode_InternFromString(s);
    return *slot == NULL ? -1 : 0;
}

PyMODINIT_FUNC PyInit__parse(void) {
    if (intern(&s_empty, "") || intern(&s_tcp, "TCP") || intern(&s_udp, "UDP") || intern(&s_sctp, "SCTP") ||
        intern(&s_default, "default") || intern(&s_metadata, "metadata") || intern(&s_namespace, "namespace") ||
        intern(&s_name, "name") || intern(&s_labels, "labels") || intern(&s_spec, "spec") ||
        intern(&s_type, "type") || intern(&s_ips, "ips") || intern(&s_ports, "ports") ||
        intern(&s_port, "port") || intern(&s_protocol, "protocol") || intern(&s_address_type, "addressType") ||
        intern(&s_endpoints, "endpoints") || intern(&s_addresses, "addresses") ||
        intern(&s_hostname, "hostname") || intern(&s_conditions, "conditions") || intern(&s_ready, "ready") ||
        intern(&s_serving, "serving") || intern(&s_terminating, "terminating") || intern(&s_zone, "zone") ||
        intern(&s_ipv4, "IPv4") || intern(&s_ipv6, "IPv6") || intern(&s_clustersetip, "ClusterSetIP") ||
        intern(&s_headless, "Headless"))
        return NULL;
    return PyModule_Create(&module);
}
