"""Operating both binaries: metrics (`stats` declares and collects, `metrics` renders),
the /health, /ready and /metrics endpoints (`http`), logging (`logs`, `querylog`) and
the process's own series and version line (`process`). May import `mcsdns.wire` (names
in the query log) and nothing else of mcsdns; everything else may import it. This file
imports nothing."""
