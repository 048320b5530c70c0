from collections import deque
from collections.abc import Sequence
from typing import Any

FORMAT: int
FRAME_HEADER_BYTES: int  # a frame's u32 payload length and u32 descriptor count

def encode(message: Any) -> bytes | None:
    """``message`` written without pickle, or None when it holds anything but exact
    built-in None, bool, int64, float, str, bytes, tuple, list or dict values."""

def decode(data: bytes, start: int, end: int) -> Any:
    """The message ``encode`` wrote into ``data[start:end]``; ValueError if malformed."""

def waiting_bytes(fd: int) -> int:
    """How many bytes the socket ``fd`` holds unread (0 where it cannot say)."""

def send_frame(fd: int, payload: bytes, fds: Sequence[int]) -> int:
    """Send ``payload`` as one frame (header, payload, ``fds`` as SCM_RIGHTS, at most 8)
    in one ``sendmsg``: the bytes sent, header included; OSError on failure."""

def receive_chunk(fd: int, size: int, dont_wait: bool, fds_out: deque[int]) -> bytes:
    """Up to ``size`` bytes in one ``recvmsg`` (b"" at the end); descriptors that came with
    them appended to ``fds_out``; BlockingIOError with ``dont_wait`` and nothing there."""
