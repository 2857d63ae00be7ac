"""Where CoreDNS sends a query for a name of the zone arriving on a port: the server block
(among the blocks serving plain DNS on that port, the one of the longest zone containing
the name), then the first plugin of its chain that takes the name, in CoreDNS's chain
order (plugin.cfg), not the Corefile's: `kubernetes` (answers its zones itself),
`multicluster` (CoreDNS's own MCS plugin: answers the zone from the ServiceImports),
`forward` (its FROM zone, minus `except`; to its upstreams, by its `policy`).

The zone's names are cut into regions by every zone named below it (keys, FROM, except,
plugin zones); one name per region (`probes`) stands for all the names in it."""

from __future__ import annotations

from dataclasses import dataclass, field

from .corefile import Block, Corefile, Directive, Key, zone_name

CHAIN = ("kubernetes", "multicluster", "forward")  # their order in CoreDNS's plugin.cfg
RESOLV_FILE = "/"  # a forward target starting so is a resolv.conf: the node's resolvers


def within(name: str, zone: str) -> bool:
    return zone == "." or name == zone or name.endswith("." + zone)


@dataclass(frozen=True)
class Upstream:
    """One forward target: an address and port, or a resolv.conf path (`host`, port 0)."""

    host: str
    port: int
    scheme: str = "dns"

    def __str__(self) -> str:
        if not self.port:
            return self.host
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'' if self.scheme == 'dns' else self.scheme + '://'}{host}:{self.port}"


@dataclass
class Forward:
    """A `forward` line: its upstreams, `policy`, `force_tcp`."""

    upstreams: list[Upstream]
    policy: str = "random"
    force_tcp: bool = False


@dataclass
class Route:
    """What a query for `name` on `port` meets: the block (None: no block takes it) and the
    plugin that answers (`plugin` "" when none does), with the forward's details."""

    name: str
    port: int
    block: Block | None = None
    key: Key | None = None
    plugin: str = ""
    forward: Forward | None = None
    others: list[Key] = field(default_factory=list)  # keys for the name on other ports


def upstream(text: str) -> Upstream:
    if text.startswith(RESOLV_FILE):
        return Upstream(text, 0)
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "dns", text
    port = 853 if scheme == "tls" else 53
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        return Upstream(host, int(tail[1:]) if tail[1:].isdigit() else port, scheme)
    head, colon, tail = rest.rpartition(":")
    if colon and tail.isdigit() and ":" not in head:
        return Upstream(head, int(tail), scheme)
    return Upstream(rest, port, scheme)


def _zones(d: Directive, block: Block) -> list[str]:
    return [zone_name(z) for z in d.args] or [k.zone for k in block.keys]


def _option(d: Directive, name: str) -> list[str] | None:
    return next((line[1:] for line in d.block if line and line[0] == name), None)


def _takes(d: Directive, block: Block, name: str) -> bool:
    if d.name == "forward":
        if not d.args or not within(name, zone_name(d.args[0])):
            return False
        return not any(within(name, zone_name(z)) for z in _option(d, "except") or [])
    if not any(within(name, z) for z in _zones(d, block)):
        return False
    if d.name == "kubernetes":
        through = _option(d, "fallthrough")
        return through is None or (bool(through) and not any(within(name, zone_name(z)) for z in through))
    return True


def _forward(d: Directive) -> Forward:
    policy = (_option(d, "policy") or ["random"])[0]
    return Forward([upstream(a) for a in d.args[1:]], policy, _option(d, "force_tcp") is not None)


def route(cf: Corefile, name: str, port: int) -> list[Route]:
    """Each way a query for `name` on `port` can go (several blocks for one zone and port,
    split by `bind` or `view`: one each)."""
    keyed = [(k, b) for b in cf.blocks for k in b.keys if k.scheme == "dns" and within(name, k.zone)]
    here = [(k, b) for k, b in keyed if k.port == port]
    others = sorted({k for k, _ in keyed if k.port != port}, key=str)
    if not here:
        return [Route(name, port, others=others)]
    best = max(len(k.zone) if k.zone != "." else 0 for k, _ in here)
    out = []
    for k, b in here:
        if (len(k.zone) if k.zone != "." else 0) != best:
            continue
        r = Route(name, port, b, k, others=[o for o in others if o.zone == k.zone or len(o.zone) > best])
        chain = sorted((d for d in b.directives if d.name in CHAIN), key=lambda d: CHAIN.index(d.name))
        d = next((d for d in chain if _takes(d, b, name)), None)
        if d is not None:
            r.plugin = d.name
            r.forward = _forward(d) if d.name == "forward" else None
        out.append(r)
    return out


def probes(cf: Corefile, zone: str) -> list[str]:
    """The zone, then every zone named in the Corefile strictly inside it."""
    named: set[str] = set()
    for b in cf.blocks:
        named.update(k.zone for k in b.keys)
        for d in b.directives:
            if d.name == "forward" and d.args:
                named.add(zone_name(d.args[0]))
                named.update(zone_name(z) for z in _option(d, "except") or [])
            elif d.name in CHAIN:
                named.update(zone_name(z) for z in d.args)
    return [zone, *sorted(n for n in named if n != zone and within(n, zone))]
