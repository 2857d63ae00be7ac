"""Command line: `mcsdns serve ...`."""

from __future__ import annotations

import argparse
import logging
import sys

from .app import Config, run, run_loop


def host_port(s: str) -> tuple[str, int]:
    host, sep, port = s.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {s!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mcsdns", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve the clusterset.local zone")
    s.add_argument("--listen", action="append", type=host_port, metavar="HOST:PORT",
                   help="UDP+TCP address (repeatable; default 0.0.0.0:53)")
    s.add_argument("--zone", default="clusterset.local")
    s.add_argument("--ttl", type=int, default=5, help="TTL of every record (default 5)")
    s.add_argument("--manifests", metavar="DIR", help="serve objects from a directory of YAML/JSON files")
    s.add_argument("--kubeconfig", metavar="PATH", help="watch a Kubernetes API (default: in-cluster)")
    s.add_argument("--context", metavar="NAME")
    s.add_argument("--namespace", action="append", default=[], dest="namespaces",
                   help="only watch these namespaces (repeatable; default all)")
    s.add_argument("--health", type=host_port, metavar="HOST:PORT", help="/health and /ready")
    s.add_argument("--metrics", type=host_port, metavar="HOST:PORT", help="Prometheus /metrics")
    s.add_argument("--workers", type=int, default=1,
                   help="server processes sharing the port with SO_REUSEPORT (default 1)")
    s.add_argument("--log-level", default="INFO")
    s.add_argument("--log-queries", action="store_true", help="log every query (slow)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = Config(
        listen=args.listen or [("0.0.0.0", 53)], zone=args.zone.rstrip("."), ttl=args.ttl,
        manifests=args.manifests, kubeconfig=args.kubeconfig, context=args.context,
        namespaces=args.namespaces, health=args.health, metrics=args.metrics,
        log_queries=args.log_queries, workers=max(1, args.workers),
    )
    if cfg.workers > 1:
        from .workers import supervise

        supervise(cfg)
    else:
        run_loop(lambda: run(cfg))
    return 0
