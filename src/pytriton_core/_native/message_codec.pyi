from typing import Any

FORMAT: int

def encode(message: Any) -> bytes | None:
    """``message`` written without pickle, or None when it holds anything but exact
    built-in None, bool, int64, float, str, bytes, tuple, list or dict values."""

def decode(data: bytes, start: int, end: int) -> Any:
    """The message ``encode`` wrote into ``data[start:end]``; ValueError if malformed."""

def waiting_bytes(fd: int) -> int:
    """How many bytes the socket ``fd`` holds unread (0 where it cannot say)."""
