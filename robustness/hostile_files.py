#!/usr/bin/env python3
"""Hostile manifest files dropped into a live server's --manifests directory, with
figures: the slowest UDP answer while each is loaded, whether the server survived,
how it was counted, and the server's peak RSS.

    python robustness/hostile_files.py --bomb-levels 8

Each file replaces the previous one in the same place (`evil.yaml` / `evil.json`):
each is refused and the last good content stays served; last, a parsable file with a
4,800-digit port has its object skipped (counted in mcsdns_skipped_objects_total).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.helpers import Prober, alias_bomb, clusterset_ip, copy_example, run_server  # noqa: E402


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bomb-levels", type=int, default=8, help="alias levels (9**N strings)")
    ap.add_argument("--depth", type=int, default=30_000, help="nested sequences")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds to probe after each file")
    args = ap.parse_args()
    deep = "[" * args.depth + "]" * args.depth
    cases = [("alias bomb", "evil.yaml", alias_bomb(args.bomb_levels)),
             ("deep YAML", "evil.yaml", "a: " + deep),
             ("deep JSON", "evil.json", deep),
             ("FIFO", "pipe.yaml", None),
             ("huge hex port", "evil.yaml",
              clusterset_ip("evil", "10.66.0.2").replace("port: 80", "port: 0x" + "f" * 4000))]
    failed = False
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        mdir = copy_example(tmp / "m")
        (mdir / "evil.yaml").write_text(clusterset_ip("evil", "10.66.0.1"))
        with run_server(["--manifests", str(mdir)], tmp) as srv:
            for label, name, text in cases:
                with Prober(srv) as probe:
                    time.sleep(0.1)
                    if text is None:
                        os.mkfifo(mdir / name)
                    else:
                        (mdir / name).write_text(text)
                    time.sleep(args.settle)
                alive = srv.proc.poll() is None
                errors = srv.metric_sum("mcsdns_source_errors_total", 'source="files"') if alive else 0
                skipped = srv.metric_sum("mcsdns_skipped_objects_total") if alive else 0
                rss = peak_rss_mib(srv.proc.pid) if alive else 0.0
                answer = [str(rd) for rr in srv.query("evil.live.svc.clusterset.local").answer
                          for rd in rr] if alive else []
                served = answer == ([] if label == "huge hex port" else ["10.66.0.1"])
                print(f"{label:14} {len((text or '').encode()):7} B: slowest answer "
                      f"{probe.worst * 1000:7.1f} ms over {probe.count} queries, lost {probe.lost}, "
                      f"server {'alive' if alive else 'DEAD'}, file errors {errors:g}, objects skipped "
                      f"{skipped:g}, answer {answer or 'none'}, peak RSS {rss:.0f} MiB")
                failed |= not alive or probe.worst > 0.1 or not served
                if not alive:
                    break
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
