"""The test API server's validation, as kube-apiserver v1.36 refuses writes and requests: object
names (a Service's or Namespace's an RFC 1123 label, others an RFC 1123 subdomain), label keys
and values, EndpointSlices (addressType required, at most 1000 endpoints, 1 to 100 addresses
each, each an IP address), core v1 Events (the involved object's namespace is the Event's;
`fieldValidation=Strict` refuses an unknown field, 400), watch options, and content negotiation
(no protobuf here: a request that accepts only protobuf is 406, as the real server answers for
custom resources). Each other refusal is a 422 `Invalid` with the real message and
`details.causes`."""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any

from .resources import Resource
from .status import HTTPError, Obj

_LABEL_RE = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL = re.compile(_LABEL_RE)
_SUBDOMAIN = re.compile(rf"{_LABEL_RE}(\.{_LABEL_RE})*")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
             "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
             "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                 "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
                 "regex used for validation is "
                 "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
KEY_MSG = ("a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and "
           "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
           "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix "
           "and '/' (e.g. 'example.com/MyName')")
VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
             "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
             "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
MAX_ENDPOINTS, MAX_ADDRESSES = 1000, 100
PROTOBUF = "application/vnd.kubernetes.protobuf"
Cause = tuple[str, str, str]  # reason, message, field


def _invalid(value: Any, msg: str) -> str:
    return f"Invalid value: {json.dumps(value)}: {msg}"


def _name(r: Resource, name: str) -> list[Cause]:
    if r.kind in ("Service", "Namespace") and "." in name:
        return [("FieldValueInvalid", _invalid(name, "must not contain dots"), "metadata.name")]
    if r.kind in ("Service", "Namespace"):
        ok, msg = len(name) <= 63 and _LABEL.fullmatch(name), LABEL_MSG
    else:
        ok, msg = len(name) <= 253 and _SUBDOMAIN.fullmatch(name), SUBDOMAIN_MSG
    return [] if ok else [("FieldValueInvalid", _invalid(name, msg), "metadata.name")]


def _labels(labels: Any) -> list[Cause]:
    out: list[Cause] = []
    for k, v in (labels or {}).items() if isinstance(labels, dict) else ():
        prefix, _, name = str(k).rpartition("/")
        bad_prefix = prefix and not _SUBDOMAIN.fullmatch(prefix)
        if not (_LABEL_NAME.fullmatch(name) and len(name) <= 63) or bad_prefix:
            out.append(("FieldValueInvalid", _invalid(k, KEY_MSG), "metadata.labels"))
        if not isinstance(v, str) or len(v) > 63:
            out.append(("FieldValueInvalid", _invalid(v, "must be no more than 63 bytes"), "metadata.labels"))
        elif not _LABEL_VALUE.fullmatch(v):
            out.append(("FieldValueInvalid", _invalid(v, VALUE_MSG), "metadata.labels"))
    return out


def _endpointslice(obj: Obj) -> list[Cause]:
    out: list[Cause] = []
    if not obj.get("addressType"):
        out.append(("FieldValueRequired", "Required value", "addressType"))
    eps = obj.get("endpoints") or []
    if len(eps) > MAX_ENDPOINTS:
        return [*out, ("FieldValueTooMany", f"Too many: {len(eps)}: must have at most {MAX_ENDPOINTS} items",
                       "endpoints")]
    for i, ep in enumerate(eps):
        addrs = (ep or {}).get("addresses") or []
        where = f"endpoints[{i}].addresses"
        if not addrs:
            out.append(("FieldValueRequired", "Required value: must contain at least 1 address", where))
        elif len(addrs) > MAX_ADDRESSES:
            too_many = f"Too many: {len(addrs)}: must have at most {MAX_ADDRESSES} items"
            out.append(("FieldValueTooMany", too_many, where))
        for j, a in enumerate(addrs[:MAX_ADDRESSES]):
            try:
                ipaddress.ip_address(a)
            except ValueError:
                out.append(("FieldValueInvalid", _invalid(a, "must be a valid IP address, (e.g. 10.9.8.7 or "
                                                          "2001:db8::ffff)"), f"{where}[{j}]"))
        if isinstance(ep, dict):
            ep.setdefault("conditions", {})  # the API's default
    return out


# A core v1 Event's fields (what `fieldValidation=Strict` accepts at the top level).
EVENT_FIELDS = frozenset({"apiVersion", "kind", "metadata", "involvedObject", "reason", "message", "source",
                          "firstTimestamp", "lastTimestamp", "count", "type", "eventTime", "series", "action",
                          "related", "reportingComponent", "reportingInstance"})


def _event(obj: Obj) -> list[Cause]:
    """A legacy (core v1, no eventTime) Event: its involved object's namespace is its own."""
    if obj.get("eventTime"):
        return []
    ns = str((obj.get("metadata") or {}).get("namespace") or "")
    obj_ns = str((obj.get("involvedObject") or {}).get("namespace") or "")
    if (obj_ns and obj_ns != ns) or (not obj_ns and ns not in ("", "default")):
        return [("FieldValueInvalid", _invalid(obj_ns, "does not match event.namespace"),
                 "involvedObject.namespace")]
    return []


def check_fields(r: Resource, obj: Any, q: dict[str, str]) -> None:
    """`fieldValidation=Strict`: 400 for an unknown field (known here: an Event's)."""
    if q.get("fieldValidation") != "Strict" or r.kind != "Event" or not isinstance(obj, dict):
        return
    unknown = sorted(set(obj) - EVENT_FIELDS)
    if unknown:
        raise HTTPError(400, "BadRequest", "strict decoding error: " +
                        ", ".join(f'unknown field "{f}"' for f in unknown))


PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml",
               "application/strategic-merge-patch+json")
CUSTOM_GROUPS = ("multicluster.x-k8s.io", "about.k8s.io")  # served from CRDs: no strategic merge


def check_patch(r: Resource, content_type: str) -> None:
    """415 for a PATCH whose Content-Type is no patch type (or a strategic merge patch of a
    custom resource), as kube-apiserver answers."""
    media = content_type.split(";")[0].strip()
    ok = PATCH_TYPES if r.group not in CUSTOM_GROUPS else PATCH_TYPES[:3]
    if media not in ok:
        raise HTTPError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                        f"accepted media types include: {', '.join(ok)}")


def validate(r: Resource, obj: Obj) -> None:
    """422 Invalid, naming every cause, if kube-apiserver would refuse this write."""
    md = obj.get("metadata") or {}
    name = str(md.get("name") or "")
    causes = (_name(r, name) if name else []) + _labels(md.get("labels"))
    if r.kind == "EndpointSlice":
        causes += _endpointslice(obj)
    if r.kind == "Event":
        causes += _event(obj)
    if not causes:
        return
    what = f"{r.kind}.{r.group}" if r.group else r.kind
    texts = [f"{field}: {msg}" for _, msg, field in causes]
    joined = texts[0] if len(texts) == 1 else f"[{', '.join(texts)}]"
    e = HTTPError(422, "Invalid", f"{what} {json.dumps(name)} is invalid: {joined}")
    e.body["details"] = {"name": name, **({"group": r.group} if r.group else {}), "kind": r.kind,
                         "causes": [{"reason": c, "message": m, "field": f} for c, m, f in causes]}
    raise e


def _list_options(msg: str) -> HTTPError:
    e = HTTPError(422, "Invalid", f'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: '
                  f"Forbidden: {msg}")
    e.body["details"] = {"group": "meta.k8s.io", "kind": "ListOptions", "causes": [
        {"reason": "FieldValueForbidden", "message": f"Forbidden: {msg}", "field": "resourceVersionMatch"}]}
    return e


def check_watch(q: dict[str, str]) -> None:
    """422 for the watch options kube-apiserver refuses."""
    if "sendInitialEvents" in q:
        if q.get("resourceVersionMatch") != "NotOlderThan":
            raise _list_options("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
    elif q.get("resourceVersionMatch"):
        raise _list_options("resourceVersionMatch is forbidden for watch unless sendInitialEvents is "
                            "provided")


def accepts(accept: str) -> str | None:
    """What the answer is to be: "PartialObjectMetadataList" or "PartialObjectMetadata" (metadata
    only), None for whole objects; 406 when nothing the request accepts can be served (this
    server speaks JSON only)."""
    kinds = [t.strip() for t in accept.split(",") if t.strip()] or ["*/*"]
    for t in kinds:
        media, *params = (p.strip() for p in t.split(";"))
        opts = dict(p.partition("=")[::2] for p in params)
        if media in ("application/json", "*/*", "application/*"):
            if opts.get("as") in ("PartialObjectMetadataList", "PartialObjectMetadata"):
                return opts["as"]
            if "as" not in opts:
                return None
    raise HTTPError(406, "NotAcceptable", "only the following media types are accepted: application/json, "
                    f"application/yaml, {PROTOBUF}")
