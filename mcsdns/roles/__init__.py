"""Process roles: what one `mcsdns serve` process is, as a class composing the zone
pipeline (`publish.pipeline`), its sources, the listeners (`transport.listeners`) and the
HTTP endpoints.

- `single.SingleProcess`: everything in one process (no --workers).
- `supervisor.Supervisor`: --workers N; runs the one Kubernetes list+watch (`Loader`,
  answering no query) or none (--manifests), forks and watches the workers, serves
  /ready and /metrics for them, sends NOTIFY.
- `worker.Worker`: one of the N; answers on the shared port and reports its `Status`
  and `Metrics` to the supervisor (`messages`).

Shared parts: `loader.Loader` (pipeline + sources + --state-dir, up to the first sync),
`serving.Serving` (listeners, signals, lameduck and drain), `pool.Pool` (the workers'
processes and pipes). May import `serveconfig` (Config) and every layer below; imported by the
CLI.
"""
