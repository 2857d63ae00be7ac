"""Operating both binaries: metrics (`stats` declares and collects, `metrics` renders),
the /health, /ready and /metrics endpoints (`http`), logging (`logs`, `querylog`), the
process's own series and version line (`process`), configuration errors (`errors`),
TSIG keys as configured (`tsigkeys`), atomic bounded file I/O (`fileio`) and inotify
(`inotify`). May import mcsdns.dns (names in the query log, TSIG keys) and nothing else
of mcsdns; everything else may import it. This file imports nothing."""
