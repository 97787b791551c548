"""Who votes and who only follows, and how a configuration change moves from one to the next.

Changes follow the single-server rule of Ongaro's thesis (section 4.1): one entry adds or removes
at most one voter, so the majorities of the old and the new configuration always overlap, and a
configuration takes effect on a server as soon as the entry is in its log. Learners (members that
receive the log but do not vote) can be added or removed in any number at once: they never count
towards a majority.
"""

from __future__ import annotations

from shardgrid.core.errors import invariant
from shardgrid.core.identity import MemberId, MemberIds
from shardgrid.core.wire import Record


class Membership(Record):
    """A configuration: the voters and the learners, each sorted (deterministic iteration)."""

    voters: MemberIds = ()
    learners: MemberIds = ()

    def __post_init__(self) -> None:
        invariant(not set(self.voters) & set(self.learners), lambda: f"a node is voter and learner: {self}")
        invariant(list(self.voters) == sorted(set(self.voters)), "voters must be sorted and distinct")
        invariant(list(self.learners) == sorted(set(self.learners)), "learners must be sorted and distinct")

    @classmethod
    def of(cls, voters: object = (), learners: object = ()) -> Membership:
        return cls(tuple(sorted(set(voters))), tuple(sorted(set(learners))))  # type: ignore[call-overload]

    @property
    def quorum(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def nodes(self) -> tuple[MemberId, ...]:
        return tuple(sorted((*self.voters, *self.learners)))

    def is_voter(self, node: MemberId) -> bool:
        return node in self.voters

    def contains(self, node: MemberId) -> bool:
        return node in self.voters or node in self.learners


class ConfChange(Record):
    """Learners added or removed in any number; at most one voter added (promoted) or removed."""

    add_learners: MemberIds = ()
    remove: MemberIds = ()
    promote: MemberId | None = None  # a learner becomes a voter
    demote: MemberId | None = None  # a voter becomes a learner

    def voter_changes(self, current: Membership) -> int:
        removed_voters = sum(1 for node in self.remove if current.is_voter(node))
        return removed_voters + (self.promote is not None) + (self.demote is not None)

    def problem(self, current: Membership) -> str:
        """Why this change cannot apply to ``current`` ('' when it can)."""
        if self.voter_changes(current) > 1:
            return "a configuration change may add or remove at most one voter"
        for node in self.add_learners:
            if current.contains(node):
                return f"{node} is already in the configuration"
        for node in self.remove:
            if not current.contains(node):
                return f"{node} is not in the configuration"
        if self.promote is not None and (self.promote not in current.learners or self.promote in self.remove):
            return f"{self.promote} is not a learner that stays"
        if self.demote is not None and (not current.is_voter(self.demote) or self.demote in self.remove):
            return f"{self.demote} is not a voter that stays"
        return ""

    def apply(self, current: Membership) -> Membership:
        problem = self.problem(current)
        invariant(not problem, lambda: f"{problem}: {self} on {current}")
        gone = set(self.remove)
        voters = {v for v in current.voters if v not in gone and v != self.demote}
        learners = {n for n in current.learners if n not in gone and n != self.promote}
        learners.update(self.add_learners)
        if self.promote is not None:
            voters.add(self.promote)
        if self.demote is not None:
            learners.add(self.demote)
        return Membership.of(voters, learners)
