"""The base classes of everything that travels between processes.

A ``Record`` is a value carried inside messages; a ``Message`` (or a log command) is one member of
a tagged union, so it names its stable wire code where it is defined: ``class X(Message, tag=20)``.
Both are msgspec Structs, encoded as arrays in field order, so that decoding builds exactly these
types and checks every field's type in C (a peer's malformed frame is refused, never half-built).
Adding a field at the end with a default keeps older frames readable; never reuse or renumber a
code.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from shardgrid.core.limits import MAX_COUNTER


class Record(msgspec.Struct, frozen=True, array_like=True):
    """An immutable value inside a message (a replica, a migration, a log entry, ...)."""


class Message(msgspec.Struct, frozen=True, array_like=True):
    """A message or a log command; every subclass gives its code as ``tag=``."""


# Here rather than in ``messages`` because Raft's messages, which sit below it, carry counters too.
Counter = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNTER)]
"""A term, log index, sequence, clock or call id: see ``MAX_COUNTER`` for why it is bounded."""
