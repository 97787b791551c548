"""The kinds of failure the core distinguishes.

A caller error (bad configuration or arguments) is the caller's to fix and changes nothing. A
protocol error is a peer or client sending something malformed or out of order; it is rejected and
changes nothing. A corrupt disk holds what no member wrote: the member says which file and where,
and serves nothing it cannot trust. An invariant violation is a bug in shardgrid itself: the core crashes on it rather
than limp on with state it can no longer trust (TigerBeetle's habit). ``invariant`` is a function,
not an ``assert``, so that it still fires under ``python -O``.
"""

from __future__ import annotations

from collections.abc import Callable


class ShardgridError(Exception):
    """Base class of every error shardgrid raises on purpose."""


class ConfigError(ShardgridError, ValueError):
    """A caller passed a value outside what shardgrid accepts; nothing was changed."""


class ProtocolError(ShardgridError):
    """A peer or client sent a malformed or out-of-order message; it was rejected."""


class CorruptDisk(ShardgridError):
    """A member's files hold what it never wrote (a failed checksum, a record no writer writes)."""


class InvariantViolation(ShardgridError, AssertionError):
    """shardgrid broke one of its own invariants: a bug, never a user's mistake."""


def invariant(condition: bool, message: str | Callable[[], str]) -> None:
    """Crash with ``InvariantViolation`` when ``condition`` is false, even under ``python -O``.

    Hot paths pass the message as a lambda: formatting it on every call would cost more than
    the check itself.
    """
    if not condition:
        raise InvariantViolation(message() if callable(message) else message)


def require(condition: bool, message: str) -> None:
    """Reject a caller's input with ``ConfigError`` when ``condition`` is false."""
    if not condition:
        raise ConfigError(message)
