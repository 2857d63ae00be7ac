"""A zone pipeline fed by its sources, up to and after the first full sync.

`Loader` is what every role that holds a zone shares: the one process, the --workers
supervisor (its loader answers no query; the workers are forked from it), a worker.
It restores --state-dir, starts the sources, and at the first full sync replaces the
restored state, loads the zone (it answers from data from then on) and lets the
cyclic GC run again (where each step runs and when the GC is held: ops/load.py).
`load_once` is the same without a loop left running (`mcsdns records`, tests).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..ops import load
from ..ops.errors import ConfigError, os_reason
from ..ops.stats import Publisher
from ..publish.pipeline import Pipeline
from ..serveconfig import Config
from ..sources import Source

if TYPE_CHECKING:  # imported where used: --state-dir and --workers only
    from ..data.store import Store
    from ..publish.statekeeper import StateKeeper
    from ..sources.kube import Begun
    from ..sources.relay import Hub

log = logging.getLogger("mcsdns")


def pipeline_for(cfg: Config, serial_file: str | None = None, store: Store | None = None) -> Pipeline:
    """The pipeline `cfg` asks for; `serial_file`: the serial state, when not STATE_DIR/serial
    (the --workers supervisor gives one file to all its workers); `store`: one a source
    already feeds."""
    return Pipeline(cfg.zone, cfg.ttl, cfg.serial, store=store, cache_bytes=cfg.cache_mib << 20,
                    locality=cfg.locality,
                    serial_file=serial_file or cfg.serial_path(), allow_transfer=cfg.allow_transfer,
                    tsig_keys=cfg.tsig_keys)


def make_sources(cfg: Config, pipeline: Pipeline, *, serving: bool = True,
                 hub: Hub | None = None, begun: Begun | None = None) -> list[Source]:
    """The configured source, feeding `pipeline`; `serving`: the zone is answered from it
    (not `records`); `hub`: --workers, the Kubernetes source also feeds the workers; `begun`:
    the Kubernetes source, already reading into `pipeline`'s store."""
    if begun is not None:
        begun.source.has_data = lambda: pipeline.ready
        return [begun.source]
    if cfg.manifests:
        from ..sources.files import FileSource
        from ..sources.limits import MANIFEST_MAX_BYTES

        return [FileSource(pipeline.store, cfg.manifests,
                           max_bytes=cfg.max_manifest_bytes or MANIFEST_MAX_BYTES)]
    from ..sources.kube import KubeSource

    has_data: Callable[[], bool] | None = (lambda: pipeline.ready) if serving else None
    if hub is not None:
        from ..sources.relay import Tee

        return [KubeSource(Tee(pipeline.store, hub), cfg.kubeconfig, cfg.context, cfg.namespaces,
                           has_data=has_data, on_synced=hub.mark_synced, whole=True)]
    return [KubeSource(pipeline.store, cfg.kubeconfig, cfg.context, cfg.namespaces, has_data=has_data,
                       later=cfg.state_dir is None)]


class Loader:
    """`pipeline` fed by `sources`, with --state-dir kept when `keep_state` (Kubernetes
    sources only: manifests are their own state).

    Invariants: `loaded` is set once the zone answers from data (first full sync, or
    restored state) and stays set; only a loader with a keeper writes --state-dir.
    """

    def __init__(self, cfg: Config, pipeline: Pipeline, sources: list[Source],
                 keep_state: bool = True) -> None:
        self.cfg = cfg
        self.pipeline = pipeline
        self.sources = sources
        self.loaded = asyncio.Event()
        if pipeline.ready:  # forked from a loaded zone
            self.loaded.set()
        self.on_loaded: list[Callable[[], None]] = []
        self.keeper: StateKeeper | None = None
        if keep_state and cfg.state_dir and not cfg.manifests:
            from ..data import state
            from ..publish.statekeeper import StateKeeper

            self.keeper = StateKeeper(pipeline.store, state.objects_path(cfg.state_dir), cfg.namespaces,
                                      cfg.state_interval, lambda: pipeline.ready and self.synced(),
                                      lambda: self.sources)
        if keep_state and cfg.state_dir and cfg.manifests:
            log.warning("--state-dir keeps only the SOA serial with --manifests "
                        "(the files are the state of the objects)")
        self._tasks: list[asyncio.Task[None]] = []

    def publishers(self) -> list[Publisher]:
        """The series of the sources and of the state keeper."""
        out: list[Publisher] = [s.publish for s in self.sources]
        return out + [self.keeper.publish] if self.keeper is not None else out

    def sources_synced(self) -> bool:
        """Every source has applied its first full view (to the store)."""
        return bool(self.sources) and all(s.synced for s in self.sources)

    def synced(self) -> bool:
        """Every source has applied its first full view, and it is all in the zone."""
        return self.sources_synced() and self.pipeline.idle

    def configure(self) -> None:
        """Load the sources' client configuration: ConfigError for one that does not load."""
        for s in self.sources:
            s.configure()

    def prepare(self, loop: asyncio.AbstractEventLoop, forked: bool = False) -> None:
        """Before anything is bound: the GC off for the first sync (`load.until_synced`),
        --state-dir restored, large work off `loop`, the sources configured. `forked`: the pipeline was loaded
        by the process this one was forked from."""
        if not forked:
            load.until_synced(loop)
            if self.keeper is not None and self.keeper.restore():
                self._set_loaded()
        self.pipeline.off_loop(loop, forked)
        self.configure()

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the sources, then wait for their first full sync (in a task) and keep
        --state-dir; ConfigError when the manifests directory cannot be read."""
        synced = self.sources_synced()  # forked from a synced supervisor: nothing to wait for
        await self._start_sources(loop)
        if not synced:
            self._tasks.append(loop.create_task(self._until_synced()))
        if self.keeper is not None:
            self._tasks.append(loop.create_task(self.keeper.writer()))

    async def _start_sources(self, loop: asyncio.AbstractEventLoop) -> None:
        for s in self.sources:
            try:
                await s.start(loop)
            except OSError as e:
                raise ConfigError(f"--manifests {self.cfg.manifests}: cannot read the directory: "
                                  f"{os_reason(e)}") from None

    def _set_loaded(self) -> None:
        self.pipeline.load()  # the loaded content gets its serial now
        self.loaded.set()
        for fn in self.on_loaded:
            fn()

    async def _until_synced(self) -> None:
        """At the first full sync: replace restored state, start answering from the data,
        then let the cyclic GC run again (`load.first_sync_done`)."""
        while not self.synced():  # once the sources are, the store ends within a few loop turns
            await asyncio.sleep(0 if self.sources_synced() else 0.005)
        if self.keeper is not None:
            self.keeper.synced()
        self._set_loaded()
        load.first_sync_done()

    async def load_once(self, timeout: float, waiting: Callable[[], None] | None = None,
                        answer: bool = True) -> list[str]:
        """Start the sources, wait up to `timeout` s for their first full view (calling
        `waiting` if it is not there at once), stop them. Returns what each source that did
        not sync lacks; empty: the zone holds all of it and, with `answer`, answers from it."""
        self.configure()
        await self._start_sources(asyncio.get_running_loop())
        if not self.synced() and waiting is not None:
            waiting()
        deadline = time.monotonic() + timeout
        while not self.synced() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        missing = [s.pending() for s in self.sources if not s.synced]
        for s in self.sources:
            await s.stop()
        if missing:
            return missing
        if answer:
            self._set_loaded()
        else:
            self.pipeline.load(answer=False)  # every service digested and marked unbuilt
        return missing

    def reload(self) -> None:
        """SIGHUP: sources re-read everything (files re-parsed, watches relisted)."""
        log.info("SIGHUP: reloading sources")
        for s in self.sources:
            s.reload()

    async def stop(self) -> None:
        """Stop the tasks, save --state-dir (refreshing its as_of), stop the sources and
        the pipeline's own work."""
        for t in self._tasks:
            t.cancel()
        if self.keeper is not None and self.keeper.live():
            await self.keeper.save()
        for s in self.sources:
            await s.stop()
        self.pipeline.close(asyncio.get_running_loop())



def loader_for(cfg: Config, *, serving: bool = True, keep_state: bool = True,
               serial_file: str | None = None, hub: Hub | None = None, begun: Begun | None = None) -> Loader:
    """A new pipeline with the configured source (as `pipeline_for`, `make_sources`); `begun`:
    that source, already reading into its store (`load.reads_first`)."""
    pipeline = pipeline_for(cfg, serial_file, begun.store if begun is not None else None)
    return Loader(cfg, pipeline, make_sources(cfg, pipeline, serving=serving, hub=hub, begun=begun),
                  keep_state)
