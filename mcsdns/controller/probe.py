"""Whether a member answers, measured by the controller itself: every `PERIOD` s, on the
member's own thread with a short deadline (`DEADLINE`) so that a hung member never delays
another's probe, a GET of the namespace `default` (a quorum read: it needs etcd, which
`/readyz` does not, as kube-apiserver v1.36 answers it "ok" for a while with etcd stopped or
killed); and its writes' timeouts.

A member is unreachable once its probe has failed (no answer within the deadline, no
connection, or a 5xx answer) and its last good answer is `after` seconds old or more, or
when one of its writes timed out less than `after` seconds ago (it is then tried again).
Any answer below 500 is good: the API server answered (a 404 where there is no such
namespace). `last_ok` is the monotonic time the last good probe was sent. `on_result` is
called after every outcome.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..kube.apiclient.errors import ApiError, Unreachable, explain
from ..kube.apiclient.transport import Timeout
from ..kube.resources import NAMESPACES
from .member.client import Member

log = logging.getLogger("mcsdns.controller")

PERIOD = 1.0  # seconds between the starts of two probes of one member
DEADLINE: Timeout = (2.0, 2.0)  # connect, read
UNREACHABLE_AFTER = 6.0  # the default of --unreachable-after
PATH = NAMESPACES.path(None, "default")


class Probe:
    """One member's measured reachability (see the module)."""

    def __init__(self, member: Member, stop: threading.Event, after: float = UNREACHABLE_AFTER,
                 on_result: Callable[[Probe], None] = lambda p: None,
                 clock: Callable[[], float] = time.monotonic, period: float = PERIOD,
                 deadline: Timeout = DEADLINE) -> None:
        self.member, self.stop, self.after = member, stop, after
        self.on_result, self.clock, self.period, self.deadline = on_result, clock, period, deadline
        self.ok = False  # reachable as measured (False until the first good answer)
        self.last_ok: float | None = None  # monotonic: when the last good probe was sent
        self.error = ""  # why the last probe failed ("" when it did not)
        self.stalled_at: float | None = None  # when a write last timed out
        self.stalled = ""  # that write's error
        self.unreachable = 0  # times it was found unreachable
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"probe-{self.member.name}")
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            sent = self.clock()
            self.note(sent, self.check())
            self.stop.wait(max(0.0, self.period - (self.clock() - sent)))

    def check(self) -> str | None:
        """One probe: None when the API server answered in time, else why not."""
        client = self.member.client
        if client is None:
            return "not connected"
        try:
            resp = client.open("GET", PATH, timeout=self.deadline)
            try:
                resp.data  # noqa: B018 - read to the end, so the connection is kept
            except Exception as e:  # noqa: BLE001 - the answer broke off
                return f"{PATH}: {e}"
            return None
        except Unreachable as e:
            return explain(e)
        except ApiError:  # an answer below 500: the server is there
            return None
        except Exception as e:  # noqa: BLE001 - a credential plugin's failure, say
            return explain(e)

    # --- outcomes -----------------------------------------------------------------------
    def note(self, sent: float, err: str | None) -> None:
        """A probe sent at `sent` ended: good (`err` None) or not."""
        with self.lock:
            if err is None:
                self.last_ok = sent if self.last_ok is None else max(self.last_ok, sent)
            self.error = err or ""
        self._judge()

    def write_timed_out(self, e: BaseException) -> None:
        """A write to the member got no answer in time: unreachable for writes for `after` s."""
        with self.lock:
            self.stalled_at, self.stalled = self.clock(), explain(e)
        self._judge()

    def why(self) -> str:
        """Why it is unreachable now ("" when it is not)."""
        with self.lock:
            if self.error:
                return f"no answer to its probe (GET {PATH}): {self.error}"
            return f"a write timed out: {self.stalled}" if self.stalled else ""

    def _judge(self) -> None:
        now = self.clock()
        with self.lock:
            lost = bool(self.error) and (self.last_ok is None or now - self.last_ok >= self.after)
            if self.stalled_at is not None and now - self.stalled_at >= self.after:
                self.stalled_at, self.stalled = None, ""
            ok = not lost and self.stalled_at is None
            if self.ok and not ok:
                self.unreachable += 1
            self.ok = ok
        self.on_result(self)
