"""The objects mcsdns serves from: ServiceImports and EndpointSlices parsed into
compact records (`objects`: one model per kind, owning its parser, its --state-dir
manifest and its declared source fields, `fields`), the store that holds them and
tells subscribers which services changed (`store`, parsing through `parsing`), and
their --state-dir snapshot format (`state`).

May import mcsdns.kube (names, keys) and mcsdns.ops; imported by sources, zone,
server and the binaries."""
