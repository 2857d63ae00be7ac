"""Run many `python -m mcsdns ARGS` command lines cheaply: this process imports mcsdns
once, then forks a child per command line that runs the package's __main__ exactly as
`python -m` does (same sys.path, sys.argv, exit status and stderr), at most JOBS at once,
each killed after TIMEOUT seconds.

Usage: python tests/support/forkrun.py JOBS TIMEOUT < [[args...], ...] (JSON) > [[status, stdout,
stderr], ...] (JSON; status -N: killed by signal N, as subprocess reports it).
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import tempfile
import traceback


def child(args: list[str], out: int, err: int, timeout: int) -> None:
    """In the forked child: `python -m mcsdns ARGS` with stdout/stderr on `out`/`err`; never returns."""
    os.dup2(out, 1)
    os.dup2(err, 2)
    signal.alarm(timeout)  # SIGALRM's default action ends a child that hangs
    code = 0
    try:
        sys.argv = ["mcsdns", *args]
        runpy.run_module("mcsdns", run_name="__main__", alter_sys=True)
    except SystemExit as e:  # as the interpreter turns sys.exit()'s argument into a status
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: S110 - a closed stream: nothing more to write
                pass
        os._exit(code & 0xFF)


def main() -> None:
    jobs, timeout = int(sys.argv[1]), int(sys.argv[2])
    cases: list[list[str]] = json.load(sys.stdin)
    sys.path[0] = os.getcwd()  # as `python -m` has it: the working directory, not tests/
    import mcsdns.cli  # noqa: F401 - the import every child would repeat, done once

    results: list[list[object]] = [[]] * len(cases)
    running: dict[int, tuple[int, int, int]] = {}  # pid -> case index, stdout fd, stderr fd
    todo = list(range(len(cases)))

    def reap() -> None:
        pid, status = os.wait()
        i, out, err = running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        texts = []
        for fd in (out, err):
            os.lseek(fd, 0, os.SEEK_SET)
            with os.fdopen(fd, "rb") as f:
                texts.append(f.read().decode(errors="replace"))
        results[i] = [code, *texts]

    while todo or running:
        while todo and len(running) < jobs:
            i = todo.pop(0)
            out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
            fds = os.dup(out.fileno()), os.dup(err.fileno())
            out.close()
            err.close()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                child(cases[i], *fds, timeout)
            running[pid] = (i, *fds)
        reap()
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
