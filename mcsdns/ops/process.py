"""This process: its version line, `mcsdns_build_info` and the process_* series
as Prometheus' client libraries define them (read from /proc; Linux only, the
series are left out elsewhere). Merged across --workers processes: CPU,
memory and fds are summed, the start time is the earliest (the supervisor's)
and the fd limit the largest."""

from __future__ import annotations

import ctypes
import os
import resource

from .. import __version__
from .stats import Put, define

BUILD_INFO = define("mcsdns_build_info", "gauge", "Build information.", ("version",))
CPU = define("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.")
RSS = define("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", merge="sum")
VSIZE = define("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", merge="sum")
OPEN_FDS = define("process_open_fds", "gauge", "Number of open file descriptors.", merge="sum")
MAX_FDS = define("process_max_fds", "gauge", "Maximum number of open file descriptors.")
START = define("process_start_time_seconds", "gauge",
               "Start time of the process since unix epoch in seconds.", merge="min")
NAMES = (BUILD_INFO, CPU, RSS, VSIZE, OPEN_FDS, MAX_FDS, START)

def release_free_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's malloc_trim), after a load
    whose temporaries (decoded JSON) left them behind; nothing where there is no glibc."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the C library the interpreter runs on
    except (OSError, AttributeError):
        return
    trim(0)


_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _boot_time() -> float:
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


def version_text(udp_io: str, prog: str = "mcsdns") -> str:
    """`mcsdns X.Y.Z (UDP: ...)`: the version and how UDP is read and written (`udp_io`)."""
    return f"{prog} {__version__} (UDP: {udp_io})"


def publish(put: Put) -> None:
    """`mcsdns_build_info` and the process_* samples of this process (`stats.Publisher`)."""
    put(BUILD_INFO, 1, version=__version__)
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        boot = _boot_time()
        nfds = len(os.listdir("/proc/self/fd"))
    except OSError:
        return
    # the fields after the command name, which is in parentheses and may hold spaces
    parts = stat[stat.rfind(b")") + 2:].split()
    utime, stime, start, vsize, rss = (int(parts[i]) for i in (11, 12, 19, 20, 21))
    put(CPU, (utime + stime) / _TICKS)
    put(RSS, rss * _PAGE)
    put(VSIZE, vsize)
    put(OPEN_FDS, nfds)
    put(MAX_FDS, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    put(START, boot + start / _TICKS)
