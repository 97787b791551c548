"""What goes into a member: the inputs ``Member.handle(now_ms, incoming)`` takes.

The runtime and the simulator turn what happens around a member (it started, a message arrived, a
timer fired, a connection came back, its process was signalled) into these, and nothing else
reaches it. What comes out is in ``effects.py``; what it tells listeners happened, in ``events.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardgrid.core.identity import MemberId
from shardgrid.core.member_disk import MemberDisk


@dataclass(frozen=True, slots=True)
class Start:
    """The member process started: begin joining through the seed addresses, or with ``disk``
    (a persistent member's data directory, read back) come back as the member that left it."""

    disk: MemberDisk | None = None


@dataclass(frozen=True, slots=True)
class Synced:
    """A persistent member's first ``persisted`` ``Persist`` effects (counted from its start) are
    on its disk: what waited for them may count on them now. ``free_bytes``: the free space of the
    file system that holds them, as the runtime saw it then (-1: not looked at). A runtime says it
    again now and then with nothing new synced, so that a member that refused writes for want of
    room sees the room come back."""

    persisted: int
    free_bytes: int = -1


@dataclass(frozen=True, slots=True)
class Receive:
    """A message arrived from ``sender_address``; ``target_uuid`` is who the sender meant.
    ``sent_ms``: for a client's message that says when it was sent, that moment on this member's
    clock as the transport can tell it, never later than it was (None when unknown)."""

    sender_address: str
    sender: MemberId | None  # None for clients
    target_uuid: str | None
    message: Any
    sent_ms: int | None = None


@dataclass(frozen=True, slots=True)
class TimerFired:
    name: str


@dataclass(frozen=True, slots=True)
class LinkRestored:
    """A connection with ``peer`` is up again after one was lost or frames to it were dropped.

    Whatever was on its way either way may be gone: the member sends again, at once, what ``peer``
    has not acknowledged, and ``peer`` acknowledges again what it already holds. Over TCP this,
    not a timer, is what resends; the timers stay as a backstop (``transfer_resend_ms``).
    """

    peer: MemberId


@dataclass(frozen=True, slots=True)
class StopSignalled:
    """The member's own process was told to stop (SIGTERM): it leaves as ``shardgrid shutdown``
    asks, but its leave is recorded even when no other data member stays, since a process told to
    stop stops (``ShutdownMember.even_if_last`` on its way to the leader). Only the process raises
    this: a client's ShutdownMember cannot carry that, so no client gets past the refusal of the
    last data member's leave. The outcome goes to ``reply_to`` as an AdminReply to ``call_id``."""

    reply_to: str
    call_id: int


Input = Start | Receive | TimerFired | LinkRestored | StopSignalled | Synced
