"""Operating both binaries: metrics (`stats` declares and collects, `metrics` renders),
the /health, /ready and /metrics endpoints (`http`), logging (`logs`, `querylog`) and
the process's own series and version (`process`). May import `mcsdns.wire` (names in the
query log) and, inside `version_text` only, the UDP transport; everything else may import
it. This file imports nothing."""
