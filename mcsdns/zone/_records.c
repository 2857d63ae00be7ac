/* The common cases of a service's records, in C: the one mirror of mcsdns/zone/records.py
 * `service_records` for them (tests/test_records_equal.py checks both against the frozen
 * reference, shape by shape, with this extension used and set aside).
 *
 * clustersetip(si, zone) -> Names | None: a ClusterSetIP service (spec 2.3).
 * headless(si, slices, zone, fallback) -> Names | None: a headless service (spec 2.4)
 * with locality off (every endpoint in tier 0, in slice order); `fallback`: answer
 * serving+terminating endpoints when none is ready.
 * Each returns None where records.py would leave a name out or cut an RRset (a name or
 * label too long, more than SAFE_COUNT records), and where endpoints merge (two of the
 * same name, an endpoint of several addresses): the Python code builds those. The
 * names, RRsets and their order, shapes (One, the shared EMPTY, dicts) and Additional
 * are records.py's; RRsets are made as ../_slots.h makes instances (RRset's
 * __post_init__ only caps what SAFE_COUNT bounds here).
 *
 * setup(ServiceImport, EndpointSlice, Endpoint, Port, RRset, One, EMPTY, A, AAAA, SRV,
 * SAFE_COUNT) is called once.
 */
#include "../_slots.h"
#include <string.h>

#define MAX_LABEL 63
#define MAX_NAME 255

enum { SI_NS, SI_NAME, SI_HEADLESS, SI_IPS, SI_PORTS };
enum { ES_CLUSTER, ES_ENDPOINTS, ES_PORTS };
enum { EP_ADDRESSES, EP_HOSTNAME, EP_READY, EP_SERVING, EP_TERMINATING };
enum { P_NAME, P_PROTOCOL, P_PORT };
enum { RR_TYPE, RR_RDATAS, RR_EXTRA, RR_ROTATE, RR_GROUPS };

static Slots m_si, m_es, m_ep, m_port, m_rrset, m_one;
static PyObject *EMPTY, *T_A, *T_AAAA, *T_SRV;
static Py_ssize_t SAFE_COUNT;
static int ready_done;

#define DECLINE NULL /* returned with no exception set: records.py builds it */

/* ---- names ---- */

typedef struct {
    unsigned char b[MAX_NAME + 1];
    Py_ssize_t n;
} Name;

/* append the label `s` (a str, ASCII, 1-63 octets), with `pre` ("_" or "") before it;
 * 0: too long or not ASCII (decline) */
static int add_label(Name *w, const char *pre, PyObject *s, int lower) {
    if (!PyUnicode_Check(s) || !PyUnicode_IS_ASCII(s))
        return 0;
    Py_ssize_t len = PyUnicode_GET_LENGTH(s), p = (Py_ssize_t)strlen(pre);
    if (len + p > MAX_LABEL || w->n + 1 + p + len > MAX_NAME)
        return 0;
    const char *c = (const char *)PyUnicode_1BYTE_DATA(s);
    w->b[w->n++] = (unsigned char)(len + p);
    memcpy(w->b + w->n, pre, (size_t)p);
    w->n += p;
    for (Py_ssize_t i = 0; i < len; i++)
        w->b[w->n++] = (unsigned char)(lower && c[i] >= 'A' && c[i] <= 'Z' ? c[i] + 32 : c[i]);
    return 1;
}

/* the labels of `s` split at dots (a cluster ID) */
static int add_dotted(Name *w, PyObject *s) {
    if (!PyUnicode_Check(s) || !PyUnicode_IS_ASCII(s))
        return 0;
    const char *c = (const char *)PyUnicode_1BYTE_DATA(s);
    Py_ssize_t len = PyUnicode_GET_LENGTH(s), start = 0;
    for (Py_ssize_t i = 0; i <= len; i++) {
        if (i < len && c[i] != '.')
            continue;
        Py_ssize_t n = i - start;
        if (n < 1 || n > MAX_LABEL || w->n + 1 + n > MAX_NAME)
            return 0; /* an empty label (records.py makes one): decline */
        w->b[w->n++] = (unsigned char)n;
        memcpy(w->b + w->n, c + start, (size_t)n);
        w->n += n;
        start = i + 1;
    }
    return 1;
}

/* `w` followed by the wire name `base` (bytes), as bytes; DECLINE when over MAX_NAME */
static PyObject *finish(Name *w, PyObject *base) {
    Py_ssize_t bn = PyBytes_GET_SIZE(base);
    if (w->n + bn > MAX_NAME)
        return DECLINE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, w->n + bn);
    if (out == NULL)
        return NULL;
    memcpy(PyBytes_AS_STRING(out), w->b, (size_t)w->n);
    memcpy(PyBytes_AS_STRING(out) + w->n, PyBytes_AS_STRING(base), (size_t)bn);
    return out;
}

/* ---- RRsets ---- */

/* RRset(rtype, rdatas, extra, rotate, groups) (rdatas and extra stolen; extra NULL: ()),
 * DECLINE over SAFE_COUNT records */
static PyObject *rrset(PyObject *rtype, PyObject *rdatas, PyObject *extra, int rotate, PyObject *groups) {
    if (rdatas == NULL || PyTuple_GET_SIZE(rdatas) > SAFE_COUNT) {
        Py_XDECREF(rdatas);
        Py_XDECREF(extra);
        return NULL;
    }
    if (extra == NULL)
        extra = PyTuple_New(0);
    if (groups == NULL)
        groups = PyTuple_New(0);
    else
        Py_INCREF(groups);
    if (extra == NULL || groups == NULL) {
        Py_DECREF(rdatas);
        Py_XDECREF(extra);
        Py_XDECREF(groups);
        return NULL;
    }
    PyObject *v[5] = {Py_NewRef(rtype), rdatas, extra, PyBool_FromLong(rotate), groups};
    return slots_make(&m_rrset, v);
}

/* One(rrset) (stolen) */
static PyObject *one(PyObject *rr) {
    if (rr == NULL)
        return NULL;
    PyObject *v[1] = {rr};
    return slots_make(&m_one, v);
}

static PyObject *family(PyObject *addr) {
    return PyBytes_GET_SIZE(addr) == 4 ? T_A : T_AAAA;
}

/* names[key] = value (stolen); -1 on error */
static int put(PyObject *names, PyObject *key, PyObject *value) {
    if (value == NULL)
        return -1;
    int rc = PyDict_SetItem(names, key, value);
    Py_DECREF(value);
    return rc;
}

/* srv_wire(priority, weight, port, target) */
static PyObject *srv(int priority, int weight, long port, const char *target, Py_ssize_t tn) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, 6 + tn);
    if (out == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    p[0] = (unsigned char)(priority >> 8), p[1] = (unsigned char)priority;
    p[2] = (unsigned char)(weight >> 8), p[3] = (unsigned char)weight;
    p[4] = (unsigned char)(port >> 8), p[5] = (unsigned char)port;
    memcpy(p + 6, target, (size_t)tn);
    return out;
}

/* `items` (a list) without repeats, in order, as a tuple */
static PyObject *distinct(PyObject *items) {
    PyObject *seen = PyDict_New();
    if (seen == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++)
        if (PyDict_SetItem(seen, PyList_GET_ITEM(items, i), Py_None) < 0) {
            Py_DECREF(seen);
            return NULL;
        }
    PyObject *keys = PyDict_Keys(seen);
    Py_DECREF(seen);
    if (keys == NULL)
        return NULL;
    PyObject *out = PyList_AsTuple(keys);
    Py_DECREF(keys);
    return out;
}

/* the service name's SRV RRset (records.py `_service_srv`) from each port name's (rds,
 * extra) in `srvs` (a list of 2-tuples) */
static int service_srv(PyObject *node, PyObject *srvs) {
    Py_ssize_t n = PyList_GET_SIZE(srvs);
    if (n == 0)
        return 1;
    if (n == 1) { /* one port name: its records, each once already */
        PyObject *pair = PyList_GET_ITEM(srvs, 0);
        PyObject *rr = rrset(T_SRV, Py_NewRef(PyTuple_GET_ITEM(pair, 0)), Py_NewRef(PyTuple_GET_ITEM(pair, 1)), 0,
                             NULL);
        return rr == NULL ? (PyErr_Occurred() ? -1 : 0) : (put(node, T_SRV, rr) < 0 ? -1 : 1);
    }
    PyObject *rds = PyList_New(0), *extra = PyList_New(0);
    int rc = rds != NULL && extra != NULL ? 1 : -1;
    for (Py_ssize_t i = 0; rc == 1 && i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(srvs, i);
        for (int half = 0; rc == 1 && half < 2; half++) {
            PyObject *part = PyTuple_GET_ITEM(pair, half);
            for (Py_ssize_t j = 0; rc == 1 && j < PyTuple_GET_SIZE(part); j++)
                if (PyList_Append(half ? extra : rds, PyTuple_GET_ITEM(part, j)) < 0)
                    rc = -1;
        }
    }
    if (rc == 1) {
        PyObject *rr = rrset(T_SRV, distinct(rds), distinct(extra), 0, NULL);
        rc = rr == NULL ? (PyErr_Occurred() ? -1 : 0) : (put(node, T_SRV, rr) < 0 ? -1 : 1);
    }
    Py_XDECREF(rds);
    Py_XDECREF(extra);
    return rc;
}

/* names[owner] = One(RRset(SRV, rds, extra)), names.setdefault(<_proto.svc>, EMPTY) and
 * (rds, extra) kept in `srvs` (records.py `port_srv`; rds and extra stolen) */
static int port_srv(PyObject *names, PyObject *srvs, PyObject *owner, PyObject *rds, PyObject *extra) {
    if (rds == NULL || extra == NULL) {
        Py_XDECREF(rds);
        Py_XDECREF(extra);
        return -1;
    }
    PyObject *pair = PyTuple_Pack(2, rds, extra);
    if (pair == NULL || PyList_Append(srvs, pair) < 0) {
        Py_XDECREF(pair);
        Py_DECREF(rds);
        Py_DECREF(extra);
        return -1;
    }
    Py_DECREF(pair);
    PyObject *rr = rrset(T_SRV, rds, extra, 0, NULL);
    if (rr == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (put(names, owner, one(rr)) < 0)
        return -1;
    const char *o = PyBytes_AS_STRING(owner);
    PyObject *proto = PyBytes_FromStringAndSize(o + 1 + (unsigned char)o[0],
                                                PyBytes_GET_SIZE(owner) - 1 - (unsigned char)o[0]);
    if (proto == NULL)
        return -1;
    PyObject *had = PyDict_SetDefault(names, proto, EMPTY);
    Py_DECREF(proto);
    return had == NULL ? -1 : 1;
}

/* the SRV owner `_<name>._<protocol>.<svc>` of a port, DECLINE when too long */
static PyObject *srv_owner(PyObject *name, PyObject *protocol, PyObject *svc) {
    Name w = {.n = 0};
    if (!add_label(&w, "_", name, 0) || !add_label(&w, "_", protocol, 1))
        return DECLINE;
    return finish(&w, svc);
}

/* ---- ClusterSetIP (records.py `_vips`, `_vip_srvs`, `_service_srv`) ---- */

static PyObject *svc_name(PyObject *si, PyObject *zone) {
    Name w = {.n = 0};
    static PyObject *s_svc;
    if (s_svc == NULL && (s_svc = PyUnicode_InternFromString("svc")) == NULL)
        return NULL;
    if (!add_label(&w, "", SLOT(&m_si, si, SI_NAME), 0) || !add_label(&w, "", SLOT(&m_si, si, SI_NS), 0) ||
        !add_label(&w, "", s_svc, 0))
        return DECLINE;
    return finish(&w, zone);
}

/* rc convention: 1 done, 0 decline, -1 error */
static int vips(PyObject *node, PyObject *ips) {
    Py_ssize_t n = PyTuple_GET_SIZE(ips);
    if (n == 1) {
        PyObject *t = family(PyTuple_GET_ITEM(ips, 0));
        PyObject *rr = rrset(t, Py_NewRef(ips), NULL, 0, NULL);
        return rr == NULL ? (PyErr_Occurred() ? -1 : 0) : (put(node, t, rr) < 0 ? -1 : 1);
    }
    if (n == 0)
        return 1;
    return 0; /* several VIPs: records.py */
}

static PyObject *clustersetip_(PyObject *si, PyObject *zone) {
    PyObject *svc = svc_name(si, zone);
    if (svc == NULL)
        return NULL;
    PyObject *names = PyDict_New(), *node = PyDict_New(), *srvs = PyList_New(0), *extra = NULL;
    PyObject *owners = PyDict_New(), *first = PyDict_New();
    int rc = names && node && srvs && owners && first ? 1 : -1;
    if (rc == 1)
        rc = vips(node, SLOT(&m_si, si, SI_IPS));
    if (rc == 1) { /* Additional: the service name's addresses */
        PyObject *ips = SLOT(&m_si, si, SI_IPS);
        extra = PyTuple_New(PyTuple_GET_SIZE(ips));
        for (Py_ssize_t i = 0; extra != NULL && i < PyTuple_GET_SIZE(ips); i++) {
            PyObject *a = PyTuple_GET_ITEM(ips, i);
            PyObject *rec = PyTuple_Pack(3, svc, family(a), a);
            if (rec == NULL) {
                Py_CLEAR(extra);
                break;
            }
            PyTuple_SET_ITEM(extra, i, rec);
        }
        rc = extra == NULL ? -1 : 1;
    }
    PyObject *ports = SLOT(&m_si, si, SI_PORTS);
    for (Py_ssize_t i = 0; rc == 1 && i < PyTuple_GET_SIZE(ports); i++) {
        PyObject *p = PyTuple_GET_ITEM(ports, i);
        PyObject *key = PyTuple_Pack(2, SLOT(&m_port, p, P_NAME), SLOT(&m_port, p, P_PROTOCOL));
        if (key == NULL || PyDict_SetDefault(first, key, SLOT(&m_port, p, P_PORT)) == NULL) {
            Py_XDECREF(key);
            rc = -1;
            break;
        }
        if (PyUnicode_GET_LENGTH(SLOT(&m_port, p, P_NAME)) > 0 && !PyDict_Contains(owners, key)) {
            PyObject *owner = srv_owner(SLOT(&m_port, p, P_NAME), SLOT(&m_port, p, P_PROTOCOL), svc);
            rc = owner == NULL ? (PyErr_Occurred() ? -1 : 0) : (put(owners, key, owner) < 0 ? -1 : 1);
        }
        Py_DECREF(key);
    }
    Py_ssize_t pos = 0;
    PyObject *key, *owner;
    while (rc == 1 && PyDict_Next(owners, &pos, &key, &owner)) {
        long port = PyLong_AsLong(PyDict_GetItem(first, key));
        PyObject *rd = srv(0, 100, port, PyBytes_AS_STRING(svc), PyBytes_GET_SIZE(svc));
        rc = port_srv(names, srvs, owner, rd == NULL ? NULL : PyTuple_Pack(1, rd), Py_NewRef(extra));
        Py_XDECREF(rd);
    }
    if (rc == 1)
        rc = service_srv(node, srvs);
    if (rc == 1)
        rc = PyDict_SetItem(names, svc, node) < 0 ? -1 : 1;
    Py_DECREF(svc);
    Py_XDECREF(node);
    Py_XDECREF(srvs);
    Py_XDECREF(extra);
    Py_XDECREF(owners);
    Py_XDECREF(first);
    if (rc != 1)
        Py_CLEAR(names);
    return names;
}

/* ---- Headless, locality off (records.py `order`, `_endpoint_names`, `_tiered_addresses`,
 * `_endpoint_srvs`, `_service_srv`) ---- */

/* the answerable (slice, endpoint) pairs, as two parallel lists */
static int answerable(PyObject *slices, int fallback, PyObject *sl_out, PyObject *ep_out) {
    for (int pass = 0; pass < 2; pass++) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(slices); i++) {
            PyObject *s = PyList_GET_ITEM(slices, i), *eps = SLOT(&m_es, s, ES_ENDPOINTS);
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(eps); j++) {
                PyObject *e = PyTuple_GET_ITEM(eps, j);
                int ok = pass == 0 ? PyObject_IsTrue(SLOT(&m_ep, e, EP_READY))
                                   : PyObject_IsTrue(SLOT(&m_ep, e, EP_SERVING)) == 1 &&
                                         PyObject_IsTrue(SLOT(&m_ep, e, EP_TERMINATING)) == 1;
                if (ok < 0)
                    return -1;
                if (ok && (PyList_Append(sl_out, s) < 0 || PyList_Append(ep_out, e) < 0))
                    return -1;
            }
        }
        if (PyList_GET_SIZE(ep_out) > 0 || !fallback)
            return 1;
    }
    return 1;
}

static PyObject *headless_(PyObject *si, PyObject *slices, PyObject *zone, int fallback) {
    PyObject *svc = svc_name(si, zone);
    if (svc == NULL)
        return NULL;
    PyObject *names = PyDict_New(), *node = PyDict_New(), *srvs = PyList_New(0);
    PyObject *sls = PyList_New(0), *eps = PyList_New(0), *hosts = PyList_New(0), *clusters = PyDict_New();
    PyObject *seen = PyDict_New(), *addrs = PyDict_New(), *targets_of = PyDict_New();
    int rc = names && node && srvs && sls && eps && hosts && clusters && seen && addrs && targets_of ? 1 : -1;
    if (rc == 1)
        rc = answerable(slices, fallback, sls, eps);
    Py_ssize_t n = rc == 1 ? PyList_GET_SIZE(eps) : 0;
    if (rc == 1 && n == 0) { /* no answerable endpoint: no records (spec 2.4.1) */
        Py_CLEAR(node);
        goto done;
    }
    /* the endpoints' names; <clusterid>.<svc> empty, each endpoint's address (one) */
    for (Py_ssize_t i = 0; rc == 1 && i < n; i++) {
        PyObject *s = PyList_GET_ITEM(sls, i), *e = PyList_GET_ITEM(eps, i);
        PyObject *cluster = SLOT(&m_es, s, ES_CLUSTER), *a = SLOT(&m_ep, e, EP_ADDRESSES);
        if (PyTuple_GET_SIZE(a) != 1) {
            rc = 0;
            break;
        }
        PyObject *cn = PyDict_GetItem(clusters, cluster); /* borrowed */
        if (cn == NULL) {
            Name w = {.n = 0};
            if (!add_dotted(&w, cluster)) {
                rc = 0;
                break;
            }
            cn = finish(&w, svc);
            if (cn == NULL || put(clusters, cluster, cn) < 0) {
                rc = cn == NULL && !PyErr_Occurred() ? 0 : -1;
                break;
            }
        }
        Name w = {.n = 0};
        PyObject *host = add_label(&w, "", SLOT(&m_ep, e, EP_HOSTNAME), 0) ? finish(&w, cn) : DECLINE;
        if (host == NULL) {
            rc = PyErr_Occurred() ? -1 : 0;
            break;
        }
        if (PyDict_SetDefault(seen, host, Py_None) == NULL || PyList_Append(hosts, host) < 0 ||
            PyDict_SetDefault(names, cn, EMPTY) == NULL)
            rc = -1;
        else if (PyDict_GET_SIZE(seen) != i + 1)
            rc = 0; /* two endpoints of one name merge: records.py */
        Py_DECREF(host);
    }
    for (Py_ssize_t i = 0; rc == 1 && i < n; i++) {
        PyObject *a = SLOT(&m_ep, PyList_GET_ITEM(eps, i), EP_ADDRESSES);
        PyObject *t = family(PyTuple_GET_ITEM(a, 0));
        PyObject *rr = rrset(t, Py_NewRef(a), NULL, 0, NULL);
        rc = rr == NULL ? (PyErr_Occurred() ? -1 : 0) : (put(names, PyList_GET_ITEM(hosts, i), one(rr)) < 0 ? -1 : 1);
        if (rc == 1 && PyDict_SetItem(addrs, PyTuple_GET_ITEM(a, 0), Py_None) < 0)
            rc = -1;
    }
    /* the service name's addresses: one tier, rotated */
    PyObject *fam[2] = {T_A, T_AAAA};
    for (int f = 0; rc == 1 && f < 2; f++) {
        PyObject *list = PyList_New(0);
        Py_ssize_t pos = 0;
        PyObject *a, *v;
        while (list != NULL && PyDict_Next(addrs, &pos, &a, &v))
            if (family(a) == fam[f] && PyList_Append(list, a) < 0)
                Py_CLEAR(list);
        if (list == NULL) {
            rc = -1;
            break;
        }
        Py_ssize_t k = PyList_GET_SIZE(list);
        if (k > 0) {
            PyObject *groups = Py_BuildValue("(n)", k);
            PyObject *rr = groups == NULL ? NULL : rrset(fam[f], PyList_AsTuple(list), NULL, k > 1, groups);
            Py_XDECREF(groups);
            rc = rr == NULL ? (PyErr_Occurred() ? -1 : 0) : (put(node, fam[f], rr) < 0 ? -1 : 1);
        }
        Py_DECREF(list);
    }
    /* an SRV per endpoint and named port: port name -> {(port, host): None}, in order */
    PyObject *last = NULL, *named = NULL; /* the named ports of `last`: [(name, protocol), port, ...] */
    for (Py_ssize_t i = 0; rc == 1 && i < n; i++) {
        PyObject *s = PyList_GET_ITEM(sls, i), *host = PyList_GET_ITEM(hosts, i);
        if (s != last) {
            last = s;
            Py_XDECREF(named);
            PyObject *ports = SLOT(&m_es, s, ES_PORTS);
            named = PyList_New(0);
            for (Py_ssize_t j = 0; named != NULL && j < PyTuple_GET_SIZE(ports); j++) {
                PyObject *p = PyTuple_GET_ITEM(ports, j);
                if (PyUnicode_GET_LENGTH(SLOT(&m_port, p, P_NAME)) == 0)
                    continue;
                PyObject *key = PyTuple_Pack(2, SLOT(&m_port, p, P_NAME), SLOT(&m_port, p, P_PROTOCOL));
                if (key == NULL || PyList_Append(named, key) < 0 || PyList_Append(named, SLOT(&m_port, p, P_PORT)) < 0)
                    Py_CLEAR(named);
                Py_XDECREF(key);
            }
            if (named == NULL) {
                rc = -1;
                break;
            }
        }
        for (Py_ssize_t j = 0; rc == 1 && j < PyList_GET_SIZE(named); j += 2) {
            PyObject *key = PyList_GET_ITEM(named, j);
            PyObject *target = PyTuple_Pack(2, PyList_GET_ITEM(named, j + 1), host);
            PyObject *targets = PyDict_GetItem(targets_of, key);
            if (targets == NULL) {
                targets = PyDict_New();
                if (targets == NULL || put(targets_of, key, targets) < 0)
                    targets = NULL;
            }
            if (target == NULL || targets == NULL || PyDict_SetDefault(targets, target, Py_None) == NULL)
                rc = -1;
            Py_XDECREF(target);
        }
    }
    Py_XDECREF(named);
    Py_ssize_t pos = 0;
    PyObject *key, *targets;
    while (rc == 1 && PyDict_Next(targets_of, &pos, &key, &targets)) {
        PyObject *owner = srv_owner(PyTuple_GET_ITEM(key, 0), PyTuple_GET_ITEM(key, 1), svc);
        if (owner == NULL) {
            rc = PyErr_Occurred() ? -1 : 0;
            break;
        }
        Py_ssize_t k = PyDict_GET_SIZE(targets), tp = 0, r = 0;
        int weight = 100 / (int)k > 1 ? 100 / (int)k : 1;
        PyObject *rds = PyTuple_New(k), *extra_hosts = PyDict_New(), *target, *v;
        while (rds != NULL && extra_hosts != NULL && PyDict_Next(targets, &tp, &target, &v)) {
            PyObject *host = PyTuple_GET_ITEM(target, 1);
            long port = PyLong_AsLong(PyTuple_GET_ITEM(target, 0));
            PyObject *rd = srv(0, weight, port, PyBytes_AS_STRING(host), PyBytes_GET_SIZE(host));
            if (rd == NULL || PyDict_SetItem(extra_hosts, host, Py_None) < 0) {
                Py_XDECREF(rd);
                Py_CLEAR(rds);
                break;
            }
            PyTuple_SET_ITEM(rds, r++, rd);
        }
        PyObject *extra = NULL;
        if (rds != NULL && extra_hosts != NULL) { /* each target's address (records.py `_extra`) */
            extra = PyTuple_New(PyDict_GET_SIZE(extra_hosts));
            Py_ssize_t hp = 0, x = 0;
            PyObject *host;
            while (extra != NULL && PyDict_Next(extra_hosts, &hp, &host, &v)) {
                PyObject *rr = SLOT(&m_one, PyDict_GetItem(names, host), 0);
                PyObject *rec = PyTuple_Pack(3, host, SLOT(&m_rrset, rr, RR_TYPE),
                                             PyTuple_GET_ITEM(SLOT(&m_rrset, rr, RR_RDATAS), 0));
                if (rec == NULL)
                    Py_CLEAR(extra);
                else
                    PyTuple_SET_ITEM(extra, x++, rec);
            }
        }
        Py_XDECREF(extra_hosts);
        rc = rds == NULL || extra == NULL ? (Py_XDECREF(rds), Py_XDECREF(extra), -1)
                                           : port_srv(names, srvs, owner, rds, extra);
        Py_DECREF(owner);
    }
    if (rc == 1)
        rc = service_srv(node, srvs);
    if (rc == 1)
        rc = PyDict_SetItem(names, svc, node) < 0 ? -1 : 1;
done:
    Py_DECREF(svc);
    Py_XDECREF(node);
    Py_XDECREF(srvs);
    Py_XDECREF(sls);
    Py_XDECREF(eps);
    Py_XDECREF(hosts);
    Py_XDECREF(clusters);
    Py_XDECREF(seen);
    Py_XDECREF(addrs);
    Py_XDECREF(targets_of);
    if (rc != 1)
        Py_CLEAR(names);
    return names;
}

/* ---- module ---- */

static PyObject *result(PyObject *names) {
    if (names != NULL || PyErr_Occurred())
        return names;
    Py_RETURN_NONE;
}

static int check(PyObject *si, PyObject *zone) {
    if (!ready_done) {
        PyErr_SetString(PyExc_RuntimeError, "setup() first");
        return 0;
    }
    if (!PyObject_TypeCheck(si, m_si.type) || !PyBytes_Check(zone)) {
        PyErr_SetString(PyExc_TypeError, "a ServiceImport and a zone name (bytes)");
        return 0;
    }
    return 1;
}

static PyObject *clustersetip(PyObject *self, PyObject *args) {
    PyObject *si, *zone;
    if (!PyArg_ParseTuple(args, "OO:clustersetip", &si, &zone) || !check(si, zone))
        return NULL;
    return result(clustersetip_(si, zone));
}

static PyObject *headless(PyObject *self, PyObject *args) {
    PyObject *si, *slices, *zone;
    int fallback;
    if (!PyArg_ParseTuple(args, "OO!Op:headless", &si, &PyList_Type, &slices, &zone, &fallback) ||
        !check(si, zone))
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(slices); i++)
        if (!PyObject_TypeCheck(PyList_GET_ITEM(slices, i), m_es.type)) {
            PyErr_SetString(PyExc_TypeError, "slices must be EndpointSlices");
            return NULL;
        }
    return result(headless_(si, slices, zone, fallback));
}

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *si, *es, *ep, *port, *rr, *one_t;
    if (ready_done) {
        PyErr_SetString(PyExc_RuntimeError, "setup() is called once");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOn:setup", &si, &es, &ep, &port, &rr, &one_t, &EMPTY, &T_A, &T_AAAA,
                          &T_SRV, &SAFE_COUNT))
        return NULL;
    static const char *const si_f[] = {"namespace", "name", "headless", "ips", "ports", NULL};
    static const char *const es_f[] = {"cluster", "endpoints", "ports", NULL};
    static const char *const ep_f[] = {"addresses", "hostname", "ready", "serving", "terminating", NULL};
    static const char *const port_f[] = {"name", "protocol", "port", NULL};
    static const char *const rr_f[] = {"rtype", "rdatas", "extra", "rotate", "groups", NULL};
    static const char *const one_f[] = {"rrset", NULL};
    if (slots_setup(&m_si, si, si_f) < 0 || slots_setup(&m_es, es, es_f) < 0 || slots_setup(&m_ep, ep, ep_f) < 0 ||
        slots_setup(&m_port, port, port_f) < 0 || slots_setup(&m_rrset, rr, rr_f) < 0 ||
        slots_setup(&m_one, one_t, one_f) < 0)
        return NULL;
    Py_INCREF(EMPTY);
    Py_INCREF(T_A);
    Py_INCREF(T_AAAA);
    Py_INCREF(T_SRV);
    ready_done = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "setup(ServiceImport, EndpointSlice, Endpoint, Port, RRset, One, EMPTY, "
                                   "A, AAAA, SRV, SAFE_COUNT)."},
    {"clustersetip", clustersetip, METH_VARARGS, "A ClusterSetIP service's names, or None."},
    {"headless", headless, METH_VARARGS, "A headless service's names with locality off, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_records", NULL, -1, methods};

PyMODINIT_FUNC PyInit__records(void) {
    return PyModule_Create(&module);
}
