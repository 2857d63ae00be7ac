from collections.abc import Callable

BATCH: int
Unsent = list[tuple[bytes, bytes]]

def serve(fd: int, respond: Callable[[bytes, bool], bytes | None],
          on_error: Callable[[bytes, BaseException], None],
          table: dict[bytes, Canned] | None = None, serial: bytearray | None = None,
          /) -> tuple[int, int, Unsent | None]: ...
def send(fd: int, unsent: Unsent, /) -> int: ...

class Canned:
    """A cached response after its ID: out [+ bodies[rot] + tail]; hits counts its uses."""

    out: bytes
    bodies: tuple[bytes, ...] | None
    tail: bytes
    hits: int
    rot: int
    serial_at: int
