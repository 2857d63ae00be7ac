"""Sources feed Kubernetes objects into the Store.

A source is started with the Store and the event loop. It must call Store
methods (`upsert`, `delete`, `replace`, `apply`) only on the event-loop
thread (use `loop.call_soon_threadsafe` from worker threads), and set
`synced` once it has applied a first complete view of every kind it serves.
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class Source(Protocol):
    name: str

    @property
    def synced(self) -> bool:
        """True once a first full view of every kind has been applied."""
        ...

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Begin feeding the store; returns once running (not necessarily synced)."""
        ...

    async def stop(self) -> None:
        ...
