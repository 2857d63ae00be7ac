from collections.abc import Callable

BATCH: int
Unsent = list[tuple[bytes, bytes]]

def serve(fd: int, respond: Callable[[bytes, bool], bytes | None],
          on_error: Callable[[bytes, BaseException], None], /) -> tuple[int, int, Unsent | None]: ...
def send(fd: int, unsent: Unsent, /) -> int: ...
