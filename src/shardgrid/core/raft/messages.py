"""Raft's messages between members. Every one carries the sender's term; ``sent_ms`` is the
leader's clock when it sent the message, echoed back so that the leader knows how recently a
majority heard from it (the leadership lease)."""

from __future__ import annotations

from dataclasses import dataclass

from shardgrid.core.raft.log import Entry, Snapshot


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """A (pre-)candidate asks for a vote; a pre-vote names the term it would start, not its own."""

    term: int
    last_index: int
    last_term: int
    pre_vote: bool
    transfer: bool = False  # the leader handed over: vote even while hearing from it


@dataclass(frozen=True, slots=True)
class VoteReply:
    term: int
    granted: bool
    pre_vote: bool


@dataclass(frozen=True, slots=True)
class AppendEntries:
    term: int
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    commit: int
    sent_ms: int


@dataclass(frozen=True, slots=True)
class AppendReply:
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


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Keeps followers from campaigning and tells them how far they may commit."""

    term: int
    commit: int
    sent_ms: int


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    term: int
    sent_ms: int


@dataclass(frozen=True, slots=True)
class InstallSnapshot:
    term: int
    snapshot: Snapshot
    sent_ms: int


@dataclass(frozen=True, slots=True)
class TimeoutNow:
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
