"""Command-line flags: the parser, value checks and configuration errors.

Every configuration mistake ends the same way: one line on stderr,
`mcsdns: --FLAG VALUE: reason`, and exit status 2. Values are checked by
the argparse `type=` functions here; what only shows when it is used (a port
in use, a kubeconfig that does not load) is raised as ConfigError and printed
by `fail`.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from .dns.names import NameTooLong, encode_name
from .kube.names import is_dns_label, valid_cluster_id
from .ops.errors import EXIT_CONFIG, os_reason

DERIVED, CIDR = "derived", "cidr"  # `mcsdns controller --clusterset-ip`: where ClusterSetIPs come from
MAX_TTL = (1 << 31) - 1  # RFC 2181 section 8
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")  # Kubernetes label value


def tell(line: str) -> None:
    """One whole line on stderr, in one write: a log line from another thread cannot land
    inside it (print writes the text and its newline apart)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def fail(message: object) -> int:
    """Print `mcsdns: message` as one line on stderr; returns the exit status, 2."""
    tell("mcsdns: " + " ".join(str(message).split()))
    return EXIT_CONFIG


def http_addrs(health: tuple[str, int] | None,
               metrics: tuple[str, int] | None) -> dict[tuple[str, int], str]:
    """The --health and --metrics addresses, each once, with the flag that gave it."""
    out: dict[tuple[str, int], str] = {}
    for flag, addr in (("--health", health), ("--metrics", metrics)):
        if addr:
            out.setdefault(addr, flag)
    return out


_ARGUMENT = re.compile(r"argument (?P<flag>[^:]+): (?P<rest>.*)", re.S)
_CHOICE = re.compile(r"invalid choice: '?(?P<value>.*?)'? \(choose from (?P<choices>.*)\)", re.S)
_CONVERSION = re.compile(r"invalid (?P<type>\S+) value: '?(?P<value>.*?)'?", re.S)


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line, `mcsdns: --FLAG VALUE: reason`, exit 2."""

    def error(self, message: str) -> NoReturn:
        m = _ARGUMENT.fullmatch(message)
        if m is not None:
            flag, rest = m["flag"], m["rest"]
            if c := _CHOICE.fullmatch(rest):
                rest = f"{c['value']}: expected one of {c['choices'].replace(chr(39), '')}"
            elif c := _CONVERSION.fullmatch(rest):
                rest = f"{c['value']}: not a valid {c['type']}"
            elif rest.startswith(_ARGPARSE_OWN):  # not about a value: "--listen: expected one argument"
                flag += ":"
            message = f"{flag} {rest}"  # a checked value: "--ttl -1: expected ..."
        sys.exit(fail(message))


_ARGPARSE_OWN = ("expected ", "ignored ", "not allowed ")  # argparse's messages not about a value


class DeprecatedAlias(argparse.Action):
    """An old name of a flag: sets the new flag's value and, the first time it is given (once
    per parser: a command parses once), warns on stderr (`mcsdns: warning: --OLD is deprecated:
    use --NEW ...`)."""

    def __init__(self, option_strings: list[str], dest: str, new: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, default=argparse.SUPPRESS,
                         help=f"deprecated: the old name of {new}", **kw)
        self.new, self.warned = new, False

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if not self.warned:
            self.warned = True
            print(f"mcsdns: warning: {option_string} is deprecated: use {self.new} (same meaning; "
                  "the old name will be removed in a later release)", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_log_args(p: argparse.ArgumentParser) -> None:
    """--log-level and --log-format, as serve, records and controller take them."""
    p.add_argument("--log-level", type=log_level, default="INFO", metavar="LEVEL",
                   help=f"least severe level logged: {', '.join(LOG_LEVELS).lower()} "
                        "(any case; default info)")
    p.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="text: `TIME [LEVEL] logger: message` (default); json: one object a line")


class _Version(argparse.Action):
    """--version: the version line, made only when asked for (finding the UDP I/O in use
    imports the server's transport, which `serve` does later: ops/load.py, stage 1)."""

    def __init__(self, option_strings: list[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from .ops.process import version_text
        from .transport.udp import io_description

        parser._print_message(version_text(io_description()) + "\n", sys.stdout)
        parser.exit()


def add_version(p: argparse.ArgumentParser) -> None:
    """--version: print the version and the UDP I/O in use, and exit."""
    p.add_argument("--version", action=_Version, help="print the version and the UDP I/O in use, and exit")


def checked(what: str, test: Callable[[str], object]) -> Callable[[str], str]:
    """A `type=` function: the value itself when `test` accepts it, else "VALUE: expected `what`"."""

    def check(s: str) -> str:
        try:
            ok = test(s)
        except ValueError:
            ok = False
        if not ok:
            raise argparse.ArgumentTypeError(f"{s}: expected {what}")
        return s

    check.__name__ = what
    return check


def host_port(s: str) -> tuple[str, int]:
    """HOST:PORT ([v6]:PORT for IPv6); an empty host is 0.0.0.0."""
    host, sep, port = s.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{s}: expected HOST:PORT")
    if int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{s}: port must be 0-65535")
    return host.strip("[]") or "0.0.0.0", int(port)


def cidr(s: str) -> str:
    """An address or CIDR, normalised (host bits cleared)."""
    try:
        return str(ipaddress.ip_network(s, strict=False))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{s}: expected an address or CIDR ({e})") from None


def _integer(s: str, low: int, high: int) -> int:
    try:
        n = int(s)
    except ValueError:
        n = low - 1
    if not low <= n <= high:
        raise argparse.ArgumentTypeError(f"{s}: expected a whole number from {low} to {high}")
    return n


def positive(s: str) -> int:
    """A whole number from 1 to 2^31-1."""
    return _integer(s, 1, (1 << 31) - 1)


def non_negative(s: str) -> int:
    """A whole number from 0 to 2^20 (a budget in MiB)."""
    return _integer(s, 0, 1 << 20)


def ttl(s: str) -> int:
    """A TTL in seconds: 0 to 2^31-1."""
    return _integer(s, 0, MAX_TTL)


def _seconds(s: str, least: float) -> float:
    try:
        v = float(s)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and (v > 0 or v == least == 0)):
        what = "0 or more" if least == 0 else "above 0"
        raise argparse.ArgumentTypeError(f"{s}: expected a number of seconds {what}")
    return v


def seconds(s: str) -> float:
    """A finite number of seconds above 0."""
    return _seconds(s, 1)


def seconds_or_zero(s: str) -> float:
    """A finite number of seconds, 0 or more."""
    return _seconds(s, 0)


def zone(s: str) -> str:
    """A domain name, without the final dot, short enough for the zone's own names."""
    from .zone.zone import Zone  # builds them

    try:
        encode_name(s)
        s.encode("ascii")
    except (ValueError, UnicodeError) as e:
        raise argparse.ArgumentTypeError(f"{s}: not a domain name ({e})") from None
    if not s.strip("."):
        raise argparse.ArgumentTypeError(f"{s}: not a domain name (the root zone)")
    try:
        Zone(s)
    except NameTooLong as e:
        raise argparse.ArgumentTypeError(f"{s}: too long for the names under it (one would be "
                                         f"{len(e.name)} octets, over 255)") from None
    return s.rstrip(".")


def log_level(s: str) -> str:
    """A logging level name, any case; returned in upper case."""
    if s.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{s}: expected one of {', '.join(LOG_LEVELS).lower()}")
    return s.upper()


def directory(s: str) -> str:
    """An existing directory that can be listed."""
    try:
        with os.scandir(s):
            pass
    except FileNotFoundError:
        raise argparse.ArgumentTypeError(f"{s}: no such directory") from None
    except NotADirectoryError:
        raise argparse.ArgumentTypeError(f"{s}: not a directory") from None
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{s}: cannot read the directory: {os_reason(e)}") from None
    return s


def dir_or_new(s: str) -> str:
    """A directory, or a path where one can be created."""
    if os.path.lexists(s) and not os.path.isdir(s):
        raise argparse.ArgumentTypeError(f"{s}: not a directory")
    return s


def readable_file(s: str) -> str:
    """An existing file that can be opened for reading."""
    if os.path.isdir(s):
        raise argparse.ArgumentTypeError(f"{s}: a directory, not a file")
    try:
        with open(s, "rb"):
            pass
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{s}: {os_reason(e)}") from None
    return s


dns_label = checked("a DNS label (lowercase letters, digits and '-', at most 63)", is_dns_label)
_cluster_id = checked("a cluster ID (a DNS label, or two joined by a dot)",
                      lambda s: not s or valid_cluster_id(s.lower()))


def cluster_id(s: str) -> str:
    """A cluster ID (any case), in lower case; "" for none."""
    return _cluster_id(s).lower()


label_value = checked("a Kubernetes label value (letters, digits, '-', '_', '.'; at most 63)",
                      _LABEL_VALUE.fullmatch)
dns_subdomain = checked("a DNS subdomain name (DNS labels joined by dots, at most 253)",
                        lambda s: len(s) <= 253 and all(is_dns_label(p) for p in s.split(".")))
non_empty = checked("a non-empty value", bool)


def cluster_region(s: str) -> tuple[str, str]:
    """CLUSTER=REGION: a cluster ID and a label value."""
    k, sep, v = s.partition("=")
    if not sep or not valid_cluster_id(k.lower()) or not v or not _LABEL_VALUE.fullmatch(v):
        raise argparse.ArgumentTypeError(f"{s}: expected CLUSTER=REGION (a cluster ID and a region)")
    return k.lower(), v
