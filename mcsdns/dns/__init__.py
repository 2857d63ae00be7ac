"""DNS wire format: the one home of names, headers, record data, the compressing writer,
query parsing, pre-rendered answers and TSIG.

Owns every DNS constant (typed enums in `types`). Imports nothing from the rest of
mcsdns except `ops.stats` (none today); every other package imports from here.
"""
