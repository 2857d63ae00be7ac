"""Live membership: the --members-dir look (`directory`) applied to a running Manager.
A new file is a member joining, a removed one a member leaving, a changed one a member
reloaded (a new client from the new file; the old one serves until the new one synced).
A file that cannot be loaded is logged and skipped until it changes. A member file is data
only (`kube.apiclient.memberfile`): one that carries a file path or a program is refused, and the
field is kept in `refused` (a metric) until the file is fixed or removed."""

from __future__ import annotations

import logging
import time

from ...kube.apiclient.kubeconfig import KubeconfigError
from ...ops.errors import ConfigError
from ..manager import Manager
from .client import Member
from .directory import MembersDir

log = logging.getLogger("mcsdns.controller")


class Membership:
    """Keeps the Manager's directory members equal to the directory's files."""

    def __init__(self, mgr: Manager | None, directory: MembersDir, static: set[str], pool: int,
                 allow_exec: bool = False) -> None:
        self.mgr, self.dir, self.static, self.pool = mgr, directory, static, pool
        self.allow_exec = allow_exec  # --members-allow-exec
        self.refused: dict[str, str] = {}  # member -> the field its file was refused for

    def load(self, name: str) -> Member:
        """Member `name` connected from its file; ConfigError when it cannot be loaded."""
        path = self.dir.file(name)
        m = Member(name=name, kubeconfig=path, origin=f"--members-dir {path}", member_file=True,
                   allow_exec=self.allow_exec)
        m.connect(pool=self.pool)
        return m

    def member(self, name: str) -> Member | None:
        """Member `name` connected from its file; None (logged) when it cannot be loaded."""
        try:
            m = self.load(name)
        except ConfigError as e:
            field = e.__cause__.refused if isinstance(e.__cause__, KubeconfigError) else ""
            if field:
                self.refused[name] = field
            else:
                self.refused.pop(name, None)
            refused = {"field": field} if field else {}
            log.error("%s; member %s not loaded until the file changes", e, name,
                      extra={"event": "member_invalid", "cluster": name, **refused})
            return None
        self.refused.pop(name, None)
        return m

    def initial(self) -> list[Member]:
        """The directory's members at start (ConfigError for a name --cluster also gives)."""
        self.dir.look()
        both = sorted(self.static & self.dir.seen.keys())
        if both:
            raise ConfigError(f"--members-dir {self.dir.path}: {', '.join(both)} also given by --cluster")
        return [m for name in sorted(self.dir.seen) if (m := self.member(name)) is not None]

    def tick(self) -> None:
        """Look at the directory when due; join, reload or drop members."""
        if not self.dir.due(time.monotonic()):
            return
        ch = self.dir.look()
        assert self.mgr is not None, "initial() only, without a Manager"
        for name in ch.removed:
            self.refused.pop(name, None)
            self.mgr.leave(name)
        for name in ch.added + ch.changed:
            if name in self.static:
                log.error("--members-dir %s: %s is a --cluster member: file ignored", self.dir.path, name)
                continue
            m = self.member(name)
            if m is None:
                continue
            log.info("--members-dir: member %s %s", name, "changed" if name in ch.changed else "added")
            self.mgr.join(m)
