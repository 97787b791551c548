"""Raft's messages between members. Every one carries the sender's term; ``sent_ms`` is the
leader's clock when it sent the message, echoed back so that the leader knows how recently a
majority heard from it (the leadership lease)."""

from __future__ import annotations

from typing import Generic

from shardgrid.core.raft.log import C, Entry, S, Snapshot
from shardgrid.core.wire import Message


class VoteRequest(Message, tag=40):
    """A (pre-)candidate asks for a vote; a pre-vote names the term it would start, not its own."""

    term: int
    last_index: int
    last_term: int
    pre_vote: bool
    transfer: bool = False  # the leader handed over: vote even while hearing from it


class VoteReply(Message, tag=41):
    term: int
    granted: bool
    pre_vote: bool


class AppendEntries(Message, Generic[C], tag=42):
    term: int
    prev_index: int
    prev_term: int
    entries: tuple[Entry[C], ...]
    commit: int
    sent_ms: int


class AppendReply(Message, tag=43):
    """On success ``index`` is the last entry the follower now holds from the leader. On a refusal
    of the append after ``rejected``, ``index`` is the newest entry that may still match, of term
    ``hint_term``. ``needs_snapshot``: the follower holds nothing yet."""

    term: int
    success: bool
    index: int
    sent_ms: int
    needs_snapshot: bool = False
    rejected: int = 0
    hint_term: int = 0


class Heartbeat(Message, tag=44):
    """Keeps followers from campaigning and tells them how far they may commit."""

    term: int
    commit: int
    sent_ms: int


class HeartbeatReply(Message, tag=45):
    term: int
    sent_ms: int


class InstallSnapshot(Message, Generic[S], tag=46):
    term: int
    snapshot: Snapshot[S]
    sent_ms: int


class TimeoutNow(Message, tag=47):
    """The leader hands its leadership over: campaign at once, without a pre-vote."""

    term: int


RaftMessage = (
    VoteRequest | VoteReply | AppendEntries | AppendReply | Heartbeat | HeartbeatReply | InstallSnapshot | TimeoutNow
)
RAFT_MESSAGE_TYPES: tuple[type, ...] = (
    VoteRequest,
    VoteReply,
    AppendEntries,
    AppendReply,
    Heartbeat,
    HeartbeatReply,
    InstallSnapshot,
    TimeoutNow,
)
