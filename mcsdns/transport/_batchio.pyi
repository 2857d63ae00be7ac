from collections.abc import Callable
from typing import TypeVar

from ..nameserver._cannedtype import Canned

BATCH: int
Unsent = list[tuple[bytes, bytes]]
__all__ = ["BATCH", "Unsent", "send", "serve"]
_C = TypeVar("_C", bound=Canned)  # the table holds Canned or a subclass (response.Canned)

# serve() and send() share static buffers: either raises RuntimeError while a call of
# either is running (re-entered from respond()/on_error(), or from another thread).
def serve(fd: int, respond: Callable[[bytes, bool], bytes | None],
          on_error: Callable[[bytes, BaseException], bytes | None],  # its response is sent
          table: dict[bytes, _C] | None = None, serial: bytearray | None = None,
          /) -> tuple[int, int, Unsent | None]: ...
def send(fd: int, unsent: Unsent, /) -> int: ...
