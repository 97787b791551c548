"""Raft's messages between members. Every one carries the sender's term; ``sent_ms`` is the
leader's clock when it sent the message, echoed back so that the leader knows how recently a
majority heard from it (the leadership lease)."""

from __future__ import annotations

from typing import Annotated, Generic

import msgspec

from shardgrid.core.limits import MAX_ENTRIES_PER_APPEND
from shardgrid.core.raft.log import C, Entry, S, Snapshot
from shardgrid.core.wire import Counter, Message


class VoteRequest(Message, tag=40, kw_only=True):
    """A (pre-)candidate asks for a vote; a pre-vote names the term it would start, not its own."""

    term: Counter
    last_index: Counter
    last_term: Counter
    pre_vote: bool
    transfer: bool = False  # the leader handed over: vote even while hearing from it


class VoteReply(Message, tag=41):
    term: Counter
    granted: bool
    pre_vote: bool


class AppendEntries(Message, Generic[C], tag=42, kw_only=True):
    term: Counter
    prev_index: Counter
    prev_term: Counter
    entries: Annotated[tuple[Entry[C], ...], msgspec.Meta(max_length=MAX_ENTRIES_PER_APPEND)]
    commit: Counter
    sent_ms: Counter


class AppendReply(Message, tag=43, kw_only=True):
    """On success ``index`` is the last entry the follower now holds from the leader. On a refusal
    of the append after ``rejected``, ``index`` is the newest entry that may still match, of term
    ``hint_term``. ``needs_snapshot``: the follower holds nothing yet."""

    term: Counter
    success: bool
    index: Counter
    sent_ms: Counter
    needs_snapshot: bool = False
    rejected: Counter = 0
    hint_term: Counter = 0


class Heartbeat(Message, tag=44):
    """Keeps followers from campaigning and tells them how far they may commit."""

    term: Counter
    commit: Counter
    sent_ms: Counter


class HeartbeatReply(Message, tag=45):
    term: Counter
    sent_ms: Counter


class InstallSnapshot(Message, Generic[S], tag=46):
    term: Counter
    snapshot: Snapshot[S]
    sent_ms: Counter


class TimeoutNow(Message, tag=47):
    """The leader hands its leadership over: campaign at once, without a pre-vote."""

    term: Counter


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
