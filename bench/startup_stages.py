"""CPU of each stage of a first load, in this process, one stage after the other: the
work `mcsdns serve --kubeconfig` does between the list responses and /ready, without the
threads, the event loop or the network, so that a change to one stage is measured
repeatably (best of --runs; the cyclic GC held off, as serve holds it off while loading).

The lists are bench/startup.py's data (8,000 ClusterSetIP + 2,000 headless ServiceImports,
4,000 EndpointSlices of 10 endpoints) as a real kube-apiserver v1.36 sends them: compact
JSON with full metadata (uid, resourceVersion, creationTimestamp, generation,
managedFields). Stages: decode (kube/apiclient/listdecode.py, fed 64 KiB at a time, with the
checkout's `Fields.decoder`: msgspec; a slice's endpoints kept as text where the checkout
can), parse (data.parsing.prepare), store (`Store.replace` of each list, a `Pipeline`
subscribed, as the loop applies them) — what /ready waits for — then digest (what
`Pipeline.load` does: each service's input digest, the serial, and the endpoints kept as
text parsed; after /ready in one process without --state-dir; a checkout that digests as it
stores counts it under store), records (zone/records.py), stage (Zone.stage), commit
(Zone.commit).

    python bench/startup_stages.py --runs 5
    python bench/startup_stages.py --repo /tmp/base --repo .   # two checkouts, side by side
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def lists(services: int, headless: int) -> dict[str, str]:
    """The two list responses' text, with the metadata a real API server adds."""
    sys.path.insert(0, str(REPO))
    from bench.startup import load

    class Collect:
        def __init__(self) -> None:
            self.objs: list[dict[str, Any]] = []

        def put(self, obj: dict[str, Any]) -> None:
            self.objs.append(obj)

    c = Collect()
    load(c, services, headless, 2, 10)
    items: dict[str, list[dict[str, Any]]] = {"ServiceImport": [], "EndpointSlice": []}
    for i, o in enumerate(c.objs):
        kind, api = o.pop("kind"), o.pop("apiVersion")
        fields: dict[str, Any] = {k: {} for k in o if k not in ("metadata", "apiVersion", "kind")}
        o["metadata"].update({
            "uid": f"{i:08x}-7fc8-4a77-bba5-5b2090fcd2ac", "resourceVersion": str(8000 + i),
            "generation": 1, "creationTimestamp": "2026-11-26T13:12:50Z",
            "managedFields": [{"manager": "mcsdns", "operation": "Update", "apiVersion": api,
                               "time": "2026-11-26T13:12:50Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {f"f:{k}": v for k, v in fields.items()}}]})
        items[kind].append(o)
    return {kind: json.dumps({"apiVersion": "v1", "kind": f"{kind}List", "items": objs,
                              "metadata": {"resourceVersion": "99999"}}, separators=(",", ":"))
            for kind, objs in items.items()}


def decoded(kind: str, text: str) -> list[dict[str, Any]]:
    """The items of a list's text, decoded as the reflector decodes them (`decode_list`, fed
    64 KiB at a time): keeping only the fields its parser reads, with the checkout's
    `Fields.decoder` where `decode_list` takes one (`typed`: msgspec)."""
    from mcsdns.data.objects import MODELS
    from mcsdns.kube.apiclient.listdecode import decode_list

    got: list[dict[str, Any]] = []
    data = text.encode()
    chunks = [data[i:i + (1 << 16)] for i in range(0, len(data), 1 << 16)]
    if "typed" in inspect.signature(decode_list).parameters:
        source = MODELS[kind].SOURCE
        later = "later" in inspect.signature(source.decoder).parameters  # as serve decodes a list
        decode_list(chunks, got.append, typed=source.decoder(True) if later else source.decoder())
    else:  # older checkouts: their own decoder
        decoder = getattr(MODELS[kind].SOURCE, "decoder", None)
        decode_list(chunks, got.append, scan=decoder() if decoder is not None else None)  # type: ignore[call-arg]
    for o in got:
        o["kind"] = kind
    return got


def measure(texts: dict[str, str]) -> dict[str, float]:
    """Seconds of CPU per stage, for the checkout on sys.path."""
    import gc
    import time

    from mcsdns.data.parsing import prepare
    from mcsdns.publish.pipeline import Pipeline
    from mcsdns.zone.leftout import LeftOut
    from mcsdns.zone.locality import OFF
    from mcsdns.zone.records import service_records

    gc.collect()
    gc.disable()
    out: dict[str, float] = {}
    t = time.process_time()

    def lap(stage: str) -> None:
        nonlocal t
        now = time.process_time()
        out[stage] = now - t
        t = now

    objs = {kind: decoded(kind, text) for kind, text in texts.items()}
    lap("decode")
    can = "later" in inspect.signature(prepare).parameters
    later: dict[str, Any] = {"later": lambda: True} if can else {}
    for kind in objs:
        for o in objs[kind]:
            prepare(o, **later)  # a listed slice's endpoints parsed when first read: under digest
    lap("parse")
    pipeline = Pipeline()
    store, zone = pipeline.store, pipeline.zone
    for kind in ("EndpointSlice", "ServiceImport"):  # the larger list is asked for first
        store.replace(kind, objs[kind])
    lap("store")
    if "fill" in inspect.signature(pipeline.load).parameters:
        pipeline.load(fill=False)  # each service digested once, no record built
    else:  # a checkout that digests as it stores
        pipeline.publisher.load()
    lap("digest")
    names = {k: service_records(si, store.service(k)[1], zone.origin, OFF, LeftOut())
             for k, si in store.imports.items()}
    lap("records")
    staged = [zone.stage(k, n) for k, n in names.items()]
    lap("stage")
    for st in staged:
        zone.commit(st)
    lap("commit")
    gc.enable()
    return out


def child(cache: Path, runs: int) -> None:
    texts = json.loads(cache.read_text())
    best: dict[str, float] = {}
    for _ in range(runs):
        for k, v in measure(texts).items():
            best[k] = min(best.get(k, v), v)
    print(json.dumps(best))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--services", type=int, default=10_000)
    p.add_argument("--headless", type=int, default=2_000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--repo", type=Path, action="append", default=[],
                   help="a checkout to measure (repeatable; default this one)")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child, a.runs)
        return 0
    cache = Path(os.environ.get("TMPDIR", "/tmp")) / f"mcsdns-stages-{a.services}-{a.headless}.json"
    if not cache.exists():
        cache.write_text(json.dumps(lists(a.services, a.headless)))
    rows: dict[str, dict[str, float]] = {}
    for repo in a.repo or [REPO]:
        repo = repo.resolve()
        python = repo / ".venv" / "bin" / "python"
        out = subprocess.run([str(python if python.exists() else sys.executable), __file__, "--child",
                              str(cache), "--runs", str(a.runs)], check=True, capture_output=True,
                             text=True, env=dict(os.environ, PYTHONPATH=str(repo)))
        rows[str(repo)] = json.loads(out.stdout)
    print(f"{a.services} services ({a.headless} headless), {2 * a.headless} slices; "
          f"CPU ms per stage, best of {a.runs}")
    stages = list(next(iter(rows.values())))
    print(f"{'checkout':40s} " + " ".join(f"{s:>8s}" for s in stages) + f" {'total':>8s}")
    for repo_name, r in rows.items():
        print(f"{repo_name[-40:]:40s} " + " ".join(f"{r[s] * 1000:8.0f}" for s in stages)
              + f" {sum(r.values()) * 1000:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
