"""Finding the cluster to join, or the peers to form the first one with.

A process that belongs to no cluster sends ``JoinRequest`` to every address it knows (its seeds,
and, after a removal, every member of the cluster it last knew) until it is a member. A member of a
cluster answers with where the leader is; the leader admits it through the log. A process that
belongs to no cluster either answers ``Unjoined``, saying whether it has heard of one.

A brand-new cluster forms only when all of these hold for the process that proposes it:
- it has never heard of a cluster (a member's answer, a refusal, or a peer that heard of one);
- ``initial_cluster_size`` processes that have never heard of a cluster found each other, and they
  include more than half of the seed addresses (so processes restarted on a minority of the seed
  hosts, cut off from their cluster, can never form a second one between them);
- it has been in contact with them for ``bootstrap_after_ms`` (time spent cut off does not count:
  a process that regains the network first hears whether a cluster answers);
- it is the first of them by address, then identity (an order every process computes alike,
  whatever its own seed list says: with each process's own seed order, three processes that each
  listed only the two others each judged another one first, and none ever proposed), or it has
  seen enough peers for another ``bootstrap_after_ms`` without a proposal binding it (the first
  may not see enough peers itself: a process that only one other lists hears only that one).
Such a process does not found the cluster at once: it proposes (``FoundingProposal``, a numbered
round), and founds only with the peers that promised it that round, once they are enough for the
rules above. A process promises one proposer at a time, and is freed only by the proposer giving
the round up (``FoundingWithdrawn``); a proposer that hears of a proposer before it in that order
gives its own round up. Every founding holds more than half of the seed addresses, so two
foundings would share a process that promised both: only one cluster is ever founded. (Found by
an outside tester: under heavy loss, each process judged "the first of us" from the peers it
happened to hear lately, two of them founded, with different member lists, and both lists grew
into one Raft log whose first snapshot differed between members: their member lists never agreed.)
A process promised to a proposer that dies before founding stays bound to it: it cannot tell a dead
proposer from a slow one whose ``Bootstrap`` is on its way, and taking another promise then could
found a second cluster. It still joins any cluster it hears of. One exception: two processes never
listen at one address at once, so a process heard at an address replaces the one heard there before
(restarted, it is a new identity that remembers nothing). A replaced process counts for nothing: a
founding lists one process per address, with the promises of the processes heard last. A promise to
a replaced proposer is released once the proposer has been replaced and silent for
``bootstrap_after_ms``: by then the founders of its round this process asks (had it founded just
before it died) answered its join requests with the founding, unless they are all cut off from it;
that founding is still taken, late, while this process is bound to no other. (Found by an outside
tester: a proposer killed once its peers promised and restarted at its address proposed for good with
no promise, its peers bound for good to the dead one; and a peer that promised and was restarted was
listed twice in a founding, once with each identity.)
Every founder starts the same log from the founding message (``Bootstrap``, naming its proposer and
round). A founder that missed it takes it from any founder: the proposer answers its repeated
promise with it, and any founder answers its join requests with it, while the cluster still lists it
(one the cluster removed since is answered as any joiner is, and joins so). A process takes only the
founding of the proposer and round it promised (or, bound to no other, of the promise it was
released from), even once it heard of a cluster (that may be this one); it refuses any other.
"""

from __future__ import annotations

import enum

from shardgrid.core import events
from shardgrid.core.errors import invariant
from shardgrid.core.identity import MemberId
from shardgrid.core.limits import MAX_COUNTER, MAX_MEMBER_COUNT, NEVER_MS
from shardgrid.core.member.context import Context
from shardgrid.core.messages import (
    Bootstrap,
    FoundingAnswer,
    FoundingProposal,
    FoundingWithdrawn,
    JoinRedirect,
    JoinRejected,
    JoinRequest,
    Unjoined,
)
from shardgrid.core.metadata import MemberRecord

# A peer not heard from for this many join retries is no longer counted towards a bootstrap.
PEER_FRESH_RETRIES = 3
# Two processes never listen at one address at once: one heard where another was heard before
# replaced it (the older one is dead, and a process restarted at an address is a new identity that
# remembers nothing). The replaced one's messages still on their way are not taken for this many
# join retries after; one still heard after that was the newer one after all (a message of the
# other came late), and takes its address back.
REPLACED_FOR_RETRIES = 2 * PEER_FRESH_RETRIES
# Peers, and processes known to be replaced, remembered at most (the least recently heard, and the
# longest replaced, go first): a process hears of no more than that many others while founding.
MAX_PEERS = MAX_MEMBER_COUNT
MAX_REPLACED = MAX_MEMBER_COUNT
# While no cluster is formed or joined, why not is reported (``ClusterNotFormed``) at most once
# every this many join retries (10 s by default).
REPORT_EVERY_RETRIES = 20
# What a seed address answered as, for that report: a peer (a process that could found a cluster
# with this one), a process with other settings, or a member of a cluster.
_AS_PEER = "peer"
_WITH_OTHER_SETTINGS = "other settings"
_AS_MEMBER = "member"


class FoundingStance(enum.Enum):
    """Where a process stands on founding the first cluster."""

    LOOKING = "looking"  # bound to no founding: it may promise a proposer, or propose
    PROPOSING = "proposing"  # asks its peers to promise its round; founds once enough did
    PROMISED = "promised"  # bound to one proposer's round until it is withdrawn or founded
    FOUNDED = "founded"  # started the log of a founding (its own or its proposer's)


FOUNDING_TRANSITIONS: dict[FoundingStance, frozenset[FoundingStance]] = {
    # Or it takes, late, the founding of a promise it was released from (its proposer was replaced).
    FoundingStance.LOOKING: frozenset({FoundingStance.PROPOSING, FoundingStance.PROMISED, FoundingStance.FOUNDED}),
    # A proposer gives its round up (it heard of a cluster or of an earlier proposer), maybe to
    # promise that earlier proposer at once; or it founds.
    FoundingStance.PROPOSING: frozenset({FoundingStance.LOOKING, FoundingStance.PROMISED, FoundingStance.FOUNDED}),
    # Withdrawn; promised again (a newer round of the same proposer); or its proposer founded.
    FoundingStance.PROMISED: frozenset({FoundingStance.LOOKING, FoundingStance.PROMISED, FoundingStance.FOUNDED}),
    FoundingStance.FOUNDED: frozenset(),
}


class Discovery:
    def __init__(self, ctx: Context, known_addresses: tuple[str, ...], cluster_seen: bool) -> None:
        self.ctx = ctx
        # The seed addresses with this process's own, whether or not its list names it: the
        # majority rule must mean the same whichever way a process was configured.
        self.seeds = frozenset((*ctx.seed_addresses, ctx.identity.address))
        self.known_addresses = tuple(dict.fromkeys((*ctx.seed_addresses, *known_addresses)))
        self.cluster_seen = cluster_seen
        self.started_ms = ctx.now_ms
        self.peers: dict[MemberId, tuple[bool, int]] = {}  # unjoined peer that never heard of a cluster -> (lite, when)
        self.first_contact_ms: int | None = None  # when another process first answered or asked
        self.leader_address: str | None = None
        self.rejected_reason = ""
        self._last_probe_ms = NEVER_MS
        # Founding: this process's stance, its own latest round (PROPOSING), the peers that
        # promised that round, and the proposer and round it promised (PROMISED).
        self.stance = FoundingStance.LOOKING
        self.round = 0
        self.proposing_since_ms = 0
        self.promises: set[MemberId] = set()
        self.promised_to: tuple[MemberId, int] | None = None
        # PROMISED: since when its proposer has been replaced at its address by another process
        # (it was restarted) and not heard from itself; the promise is released bootstrap_after_ms
        # after, unless a founder of that round sends its founding first.
        self._proposer_replaced_ms: int | None = None
        # The promise last released so: its founding, should a founder send it late, is still taken
        # whenever this process is bound to no other (the founding may need it as a voter).
        self._released_from: tuple[MemberId, int] | None = None
        self._replaced: dict[MemberId, int] = {}  # a process replaced at its address -> since when
        # After giving its round up to an earlier proposer, it proposes again no sooner than this:
        # the earlier one's proposal is on its way.
        self._no_proposal_before_ms = 0
        # Since when it has seen enough peers to found, bound to no proposer, without being first.
        self._enough_since_ms: int | None = None
        self._last_report_ms: int | None = None  # when it last said why no cluster formed
        # Seed addresses (no others: bounded by the seed list) -> what answered there last, and when.
        self._seeds_heard: dict[str, tuple[str, int]] = {}
        # The member whose data directory this process came back from at another address: it asks
        # to be renamed in that member's cluster, and founds none (``moved``).
        self.moved_from: MemberId | None = None

    def moved(self, moved_from: MemberId, known_addresses: tuple[str, ...]) -> None:
        """This process holds ``moved_from``'s data directory and listens at another address: it
        looks for that member's cluster (its seeds, and where the members its log listed were) to
        be renamed in it, and never founds one."""
        self.moved_from = moved_from
        self.known_addresses = tuple(dict.fromkeys((*self.known_addresses, *known_addresses)))
        self._heard_of_cluster()

    def _request(self, heard_of_cluster: bool) -> JoinRequest:
        return JoinRequest(self.ctx.identity, self.ctx.lite, heard_of_cluster, self._digest, moved_from=self.moved_from)

    def tick(self, asked: set[str]) -> Bootstrap | None:
        """Probe what is due; returns the founding message when this process should bootstrap
        (the caller ignores it once it holds a log)."""
        config = self.ctx.config
        self._release_a_replaced_proposer()
        if self.ctx.now_ms - self._last_probe_ms >= config.join_retry_ms:
            self._last_probe_ms = self.ctx.now_ms
            request = self._request(self.cluster_seen)
            targets = list(self.known_addresses)
            if self.leader_address is not None and self.leader_address not in targets:
                targets.append(self.leader_address)
            for address in targets:
                if address != self.ctx.identity.address:
                    asked.add(address)
                    self.ctx.send_to_address(address, request)
            self._repeat_founding_messages()
        founding = self._founding()
        if founding is None:
            self._report()
        return founding

    def on_redirect(self, sender: str, message: JoinRedirect, asked: set[str]) -> None:
        self._heard_at(sender, _AS_MEMBER)
        self._heard_of_cluster()  # a cluster exists: never form another one
        if message.leader_address is not None and message.leader_address != self.ctx.identity.address:
            self.leader_address = message.leader_address
            asked.add(message.leader_address)
            request = self._request(True)
            self.ctx.send_to_address(message.leader_address, request)

    def on_rejected(self, sender: str, message: JoinRejected) -> None:
        self._heard_at(sender, _AS_MEMBER)
        self._heard_of_cluster()
        self.rejected_reason = message.reason

    @property
    def _digest(self) -> str:
        return self.ctx.config.settings_digest

    def on_unjoined(self, message: Unjoined) -> None:
        if not self._current(message.member):
            return
        same = message.settings_digest == self._digest
        self._heard_at(message.member.address, _AS_PEER if same else _WITH_OTHER_SETTINGS)
        if same:  # never found a cluster with other settings
            self._heard_peer(message.member, message.lite, message.heard_of_cluster)
        elif message.heard_of_cluster:
            self._heard_of_cluster()  # its news that a cluster exists holds whatever its settings

    def on_join_request(self, message: JoinRequest) -> None:
        """Another process looking for a cluster: it is a peer, and it should know we are one."""
        if message.member == self.ctx.identity or not self._current(message.member):
            return
        same = message.settings_digest == self._digest
        self._heard_at(message.member.address, _AS_PEER if same else _WITH_OTHER_SETTINGS)
        if not same:
            # Not a peer: a cluster formed with it would disagree on what every member keeps. Its
            # news that a cluster exists still holds.
            if message.heard_of_cluster:
                self._heard_of_cluster()
            return
        self._heard_peer(message.member, message.lite, message.heard_of_cluster)
        reply = Unjoined(self.ctx.identity, self.ctx.lite, self.cluster_seen, self._digest)
        self.ctx.send_to_address(message.member.address, reply)

    def _heard_peer(self, peer: MemberId, lite: bool, heard_of_cluster: bool) -> None:
        if peer == self.ctx.identity:
            return
        if self.first_contact_ms is None:
            self.first_contact_ms = self.ctx.now_ms
        if heard_of_cluster:
            self._heard_of_cluster()  # a cluster exists: we join it, we do not found another
        else:
            if peer not in self.peers and len(self.peers) >= MAX_PEERS:
                # The stalest peer that did not promise goes (a promise is kept while its round runs).
                unbound = [p for p in self.peers if p not in self.promises]
                if not unbound:
                    return
                del self.peers[min(unbound, key=lambda p: self.peers[p][1])]
            self.peers[peer] = (lite, self.ctx.now_ms)

    def _heard_at(self, address: str, what: str) -> None:
        if address in self.seeds and address != self.ctx.identity.address:
            self._seeds_heard[address] = (what, self.ctx.now_ms)

    def _current(self, member: MemberId) -> bool:
        """Whether ``member``'s founding messages are taken: it is the process heard last at its
        address (an earlier one there is dead), so a founding lists one process per address and
        counts no promise of a dead one. (Found by an outside tester: a peer that promised and was
        restarted at once was listed twice in the founding, with each of its identities; and a
        proposer killed after its peers promised and restarted at its address found them bound for
        good to the dead one.)"""
        me = self.ctx.identity
        if member.address == me.address:
            return member == me  # another process at this address was an earlier one of us: dead
        now = self.ctx.now_ms
        proposer = self.promised_to[0] if self.promised_to is not None else None
        replaced_ms = self._replaced.get(member)
        if replaced_ms is not None:
            if member == proposer and self._proposer_replaced_ms is not None:
                # The proposer itself still speaks: it may be alive after all (the message that
                # replaced it was another's, late); its promise is released only once it is silent.
                self._proposer_replaced_ms = now
            if now - replaced_ms <= REPLACED_FOR_RETRIES * self.ctx.config.join_retry_ms:
                return False  # a message of a dead process, late
            del self._replaced[member]
        if member == proposer:
            self._proposer_replaced_ms = None  # heard at its address again: not replaced
        for older in [p for p in self.peers if p.address == member.address and p != member]:
            self._replace(older)
        if proposer is not None and proposer.address == member.address and proposer != member:
            self._replace(proposer)
        return True

    def _replace(self, older: MemberId) -> None:
        """``older`` was replaced at its address by a newer process: it counts for nothing now."""
        self.peers.pop(older, None)
        self.promises.discard(older)
        self._replaced.pop(older, None)
        self._replaced[older] = self.ctx.now_ms
        while len(self._replaced) > MAX_REPLACED:
            del self._replaced[next(iter(self._replaced))]
        if (
            self.stance is FoundingStance.PROMISED
            and self.promised_to is not None
            and self.promised_to[0] == older
            and self._proposer_replaced_ms is None
        ):
            self._proposer_replaced_ms = self.ctx.now_ms

    def _release_a_replaced_proposer(self) -> None:
        """A promise to a proposer since replaced at its address (restarted: the new process
        remembers nothing, and drops what is sent to the old one) is released once the proposer
        has been replaced and silent for bootstrap_after_ms. Until then a founder of its round may
        still send the founding (the proposer may have founded just before it died: every founder
        answers this process's join requests with it); after, this process is free again, and
        still takes that founding should it come late while bound to no other. (Found by an
        outside tester: a proposer killed after its peers promised and restarted at its port
        proposed for good with no promise, the others waiting for good for the founding of the
        dead one.)"""
        since_ms = self._proposer_replaced_ms
        if self.stance is not FoundingStance.PROMISED or since_ms is None:
            return
        if self.ctx.now_ms - since_ms >= self.ctx.config.bootstrap_after_ms:
            self._released_from, self.promised_to = self.promised_to, None
            self._set_stance(FoundingStance.LOOKING)

    def _heard_of_cluster(self) -> None:
        """A cluster exists: this process joins it and founds none; a round it proposes is given up."""
        self.cluster_seen = True
        if self.stance is FoundingStance.PROPOSING:
            self._withdraw()

    def accepts(self, sender: MemberId | None, message: Bootstrap) -> bool:
        """Whether to found the cluster ``message`` describes: the founding of the proposer and
        round this process promised, naming this process, with voters among its members, sent by
        any of its founders (the proposer, or a founder answering this process's join requests:
        the proposer may have died since). It is taken even once this process heard of a cluster
        (that may be this very one: a founder that missed the founding hears of the cluster it
        promised to found): a promise binds a process to that founding and no other, so taking it
        founds no second cluster. (Found by an outside tester: a founder that missed the founding
        message refused it from any founder but its proposer, and from anyone once it had heard of
        the cluster; the others removed it, and it never joined.)"""
        if sender is None or message.proposer is None:
            return False
        if self.stance is FoundingStance.PROMISED:
            promised = self.promised_to
        elif self.stance is FoundingStance.FOUNDED:
            promised = None
        else:
            # Bound to no round another could found with (a proposer that founded never withdraws):
            # the founding of a promise it was released from binds nothing else.
            promised = self._released_from
        if promised != (message.proposer, message.round):
            return False
        members = {m.id for m in message.members}
        return (
            self.ctx.identity in members
            and message.proposer in members
            and sender in members
            and bool(message.voters)
            and set(message.voters) <= members
        )

    def founded(self, own: bool) -> None:
        """This process started the log of a founding (``own``: of its own round): it takes part
        in no other. A round of its own it was proposing when it took another's founding (one it
        had been released from) is given up: the peers that promised it are free."""
        if self.stance is FoundingStance.PROPOSING and not own:
            self._withdraw()
        self._set_stance(FoundingStance.FOUNDED)

    # --- promising -------------------------------------------------------------------------------

    def on_proposal(self, sender: MemberId, message: FoundingProposal) -> None:
        """A proposer asks for this process's promise: given when it is bound to no other (or to
        a proposer after this one, which it gives up: the first by order founds)."""
        if message.settings_digest != self._digest or sender == self.ctx.identity:
            return  # not a peer: it could never found a cluster with us
        if not self._current(sender):
            return  # a process since replaced at its address: dead
        if self.cluster_seen:
            self.ctx.send(sender, FoundingAnswer(message.round, False, None, heard_of_cluster=True))
            return
        if sender not in self.peers:
            return  # not found yet (its JoinRequest or Unjoined is on its way): it asks again
        stance = self.stance
        if stance is FoundingStance.LOOKING:
            self._promise(sender, message.round)
        elif stance is FoundingStance.PROMISED:
            invariant(self.promised_to is not None, "a promised process knows whom it promised")
            proposer, promised_round = self.promised_to  # type: ignore[misc]
            if proposer != sender:
                self.ctx.send(sender, FoundingAnswer(message.round, False, proposer))
            elif message.round >= promised_round:
                self._promise(sender, message.round)  # the same proposer's newer round, or the same again
        elif stance is FoundingStance.PROPOSING:
            if self._order(sender) < self._order(self.ctx.identity):
                self._withdraw()
                self._promise(sender, message.round)
            else:
                self.ctx.send(sender, FoundingAnswer(message.round, False, self.ctx.identity))

    def on_withdrawn(self, sender: MemberId, message: FoundingWithdrawn) -> None:
        if self.stance is FoundingStance.PROMISED and self.promised_to == (sender, message.round):
            self.promised_to = None
            self._set_stance(FoundingStance.LOOKING)

    def _promise(self, proposer: MemberId, round_: int) -> None:
        self.promised_to = (proposer, round_)
        self._set_stance(FoundingStance.PROMISED)
        self.ctx.send(proposer, FoundingAnswer(round_, True))

    # --- proposing -------------------------------------------------------------------------------

    def on_answer(self, sender: MemberId, message: FoundingAnswer) -> None:
        if message.heard_of_cluster:
            self._heard_at(sender.address, _AS_MEMBER)  # (or a peer that heard of one: it answered)
            self._heard_of_cluster()
            return
        if not self._current(sender):
            return  # a process since replaced at its address: its promise died with it
        current = self.stance is FoundingStance.PROPOSING and message.round == self.round
        if message.promised:
            if current and sender in self.peers:
                self.promises.add(sender)
            elif message.round <= self.round:
                # A promise to a round this process no longer runs (or never will): free it.
                self.ctx.send(sender, FoundingWithdrawn(message.round))
            return
        rival = message.promised_to
        if not current or rival is None or rival.address == self.ctx.identity.address:
            # Bound to us, or to an earlier process at our address (dead: it released it in time).
            return
        if self._order(rival) < self._order(self.ctx.identity):
            # An earlier proposer exists: give our round up; its proposal reaches us in turn.
            self._withdraw()
            self._no_proposal_before_ms = self.ctx.now_ms + self.ctx.config.bootstrap_after_ms
        else:
            # A later proposer holds that peer: ask it too, and it gives its round up to ours.
            self.ctx.send(rival, FoundingProposal(self.round, self._digest))

    def _propose(self, candidates: list[MemberId]) -> None:
        invariant(self.round < MAX_COUNTER, "founding rounds stay within MAX_COUNTER")
        self.round += 1
        self.promises = set()
        self.proposing_since_ms = self.ctx.now_ms
        self._set_stance(FoundingStance.PROPOSING)
        proposal = FoundingProposal(self.round, self._digest)
        for peer in candidates:
            self.ctx.send(peer, proposal)

    def _withdraw(self) -> None:
        """Give our round up for good: every process that promised it is free again (one whose
        promise arrives later is freed when it does)."""
        invariant(self.stance is FoundingStance.PROPOSING, "only a proposer withdraws its round")
        withdrawn = FoundingWithdrawn(self.round)
        for peer in sorted(self.promises):
            self.ctx.send(peer, withdrawn)
        self.promises = set()
        self._set_stance(FoundingStance.LOOKING)

    def _repeat_founding_messages(self) -> None:
        """Every join retry: a proposer asks again the fresh peers that have not promised yet,
        and a promised process tells its proposer again (either message may have been lost)."""
        if self.stance is FoundingStance.PROPOSING:
            proposal = FoundingProposal(self.round, self._digest)
            for peer in self._fresh_peers():
                if peer not in self.promises:
                    self.ctx.send(peer, proposal)
        elif self.stance is FoundingStance.PROMISED and self.promised_to is not None:
            proposer, promised_round = self.promised_to
            self.ctx.send(proposer, FoundingAnswer(promised_round, True))

    def _set_stance(self, new: FoundingStance) -> None:
        invariant(
            new in FOUNDING_TRANSITIONS[self.stance], lambda: f"founding stance {self.stance.value} -> {new.value}"
        )
        self.stance = new
        self._enough_since_ms = None  # bound, or free again: the first of us gets its turn first
        self._proposer_replaced_ms = None

    # --- forming a new cluster -------------------------------------------------------------------

    def _fresh_peers(self) -> list[MemberId]:
        fresh_ms = PEER_FRESH_RETRIES * self.ctx.config.join_retry_ms
        now = self.ctx.now_ms
        return sorted(p for p, (_, heard) in self.peers.items() if now - heard <= fresh_ms)

    def _founding(self) -> Bootstrap | None:
        if self.cluster_seen:
            return None
        if self.stance is FoundingStance.LOOKING and self._may_propose():
            self._propose(self._fresh_peers())
        if self.stance is not FoundingStance.PROPOSING:
            return None
        founders = {p: self.peers[p][0] for p in self.promises}
        founders[self.ctx.identity] = self.ctx.lite
        if not self._may_found(founders):
            return None
        waited_ms = self.ctx.now_ms - self.proposing_since_ms
        if not set(self._fresh_peers()) <= self.promises and waited_ms < self.ctx.config.bootstrap_after_ms:
            return None  # the other peers may still promise: a founding with all of them needs no joins
        invariant(self.promises <= set(self.peers), "a founding lists only peers that promised its round")
        invariant(len({p.address for p in founders}) == len(founders), "a founding lists one process per address")
        ordered = sorted(founders, key=self._order)
        members = tuple(MemberRecord(p, founders[p]) for p in ordered)
        data = [p for p in ordered if not founders[p]]
        voters = tuple(sorted(data[: self.ctx.config.voter_target(len(data))]))
        return Bootstrap(members, voters, self.round, self.ctx.identity)

    def _may_propose(self) -> bool:
        """The conditions of the module's docstring for proposing a founding."""
        config = self.ctx.config
        now = self.ctx.now_ms
        if now - self.started_ms < config.bootstrap_after_ms or now < self._no_proposal_before_ms:
            self._enough_since_ms = None
            return False
        if config.initial_cluster_size > 1 and (
            self.first_contact_ms is None or now - self.first_contact_ms < config.bootstrap_after_ms
        ):
            self._enough_since_ms = None
            return False
        peers = {p: self.peers[p][0] for p in self._fresh_peers()}
        peers[self.ctx.identity] = self.ctx.lite
        if not self._may_found(peers):
            self._enough_since_ms = None
            return False
        if min(peers, key=self._order) == self.ctx.identity:
            return True  # the first of us proposes
        # The first may not see enough peers to propose (it may hear only this process), or may
        # not count enough of its own seeds: after another bootstrap_after_ms with no proposal
        # binding this process, it proposes itself. Two proposers cannot both found (each process
        # promises one); the later of them by the order gives its round up where they meet.
        if self._enough_since_ms is None:
            self._enough_since_ms = now
        return now - self._enough_since_ms >= config.bootstrap_after_ms

    def _may_found(self, founders: dict[MemberId, bool]) -> bool:
        """Enough processes, a data member among them, and more than half of the seed addresses
        (fewer may be a cut-off part of a cluster)."""
        if len(founders) < self.ctx.config.initial_cluster_size or all(founders.values()):
            return False
        at_seeds = {p.address for p in founders} & self.seeds
        return len(at_seeds) * 2 > len(self.seeds)

    @staticmethod
    def _order(replica: MemberId) -> tuple[str, str]:
        """Who is first: the same on every process (a process's own seed order is not: each
        process of three that listed only the two others judged another one first)."""
        return (replica.address, replica.uuid)

    # --- saying why no cluster formed ------------------------------------------------------------

    def _report(self) -> None:
        """At most once every REPORT_EVERY_RETRIES join retries while no cluster is formed or
        joined: which seeds answered (as what), how many processes are still missing, what it
        waits for and whom. Each reason says what this process knows, no more, and a seed that
        answered as a member of a cluster, or with other settings, is not silent. (An outside
        tester asked for a truthful report; checking it found a seed that answered with other
        settings reported silent, with "found 1 of the 3 processes" as the only reason; a process
        waiting to be admitted reporting silent every member that had answered it; and a process
        promised to a restarted proposer naming nobody it waited for.)"""
        config = self.ctx.config
        now = self.ctx.now_ms
        since = self.started_ms if self._last_report_ms is None else self._last_report_ms
        if self.stance is FoundingStance.FOUNDED or now - since < REPORT_EVERY_RETRIES * config.join_retry_ms:
            return
        self._last_report_ms = now
        own = self.ctx.identity.address
        fresh = self._fresh_peers()
        fresh_ms = PEER_FRESH_RETRIES * config.join_retry_ms
        heard = {a: what for a, (what, at) in self._seeds_heard.items() if now - at <= fresh_ms}
        answered = (set(heard) | {p.address for p in fresh} | {own}) & self.seeds
        found = len(fresh) + 1
        missing = max(0, config.initial_cluster_size - found)
        seeds_needed = len(self.seeds) // 2 + 1
        reason, waiting_for = self._why_not_formed(fresh, heard, found, missing, seeds_needed)
        self.ctx.emit(
            events.ClusterNotFormed(
                reason=reason,
                stance=self.stance.value,
                found=found,
                initial_cluster_size=config.initial_cluster_size,
                missing=missing,
                seeds_answered=tuple(sorted(answered)),
                seeds_silent=tuple(sorted(self.seeds - answered)),
                seeds_needed=seeds_needed,
                waiting_for=waiting_for,
            )
        )

    def _why_not_formed(
        self, fresh: list[MemberId], heard: dict[str, str], found: int, missing: int, seeds_needed: int
    ) -> tuple[str, str]:
        """The report's reason, and the addresses it waits for (comma-separated, '' for none)."""
        config = self.ctx.config
        now = self.ctx.now_ms
        bootstrap_ms = config.bootstrap_after_ms
        if self.cluster_seen:
            if self.rejected_reason:
                return f"a cluster exists and refused this process: {self.rejected_reason}", self.leader_address or ""
            if self.stance is FoundingStance.PROMISED and self.promised_to is not None:
                proposer, round_ = self.promised_to
                return (
                    f"a cluster exists (it may be the one this process promised to found: round {round_} of "
                    f"{proposer.address}): waiting for that founding from any of its founders, or to be "
                    "admitted by its leader"
                ), ",".join(dict.fromkeys(a for a in (proposer.address, self.leader_address) if a))
            leader = self.leader_address
            if leader is not None:
                return f"a cluster exists: waiting to be admitted by its leader {leader}", leader
            members = ",".join(sorted(a for a, what in heard.items() if what == _AS_MEMBER))
            return "a cluster exists, but no member that answered knows its leader yet: asking again", members
        if self.stance is FoundingStance.PROMISED and self.promised_to is not None:
            proposer, round_ = self.promised_to
            if self._proposer_replaced_ms is not None:
                left_ms = max(0, self._proposer_replaced_ms + bootstrap_ms - now)
                return (
                    f"promised round {round_} of {proposer.address}, where another process answers now (it "
                    f"was restarted): released in {left_ms} ms unless a founder of that round sends its founding"
                ), proposer.address
            peer = self.peers.get(proposer)
            last = f"it last answered {now - peer[1]} ms ago" if peer is not None else "nothing heard from it lately"
            return f"promised round {round_} of {proposer.address}: waiting for its founding ({last})", proposer.address
        others = sorted(a for a, what in heard.items() if what == _WITH_OTHER_SETTINGS)
        also = f"; {', '.join(others)} answered with other settings: no cluster is founded with them" if others else ""
        if self.stance is FoundingStance.PROPOSING:
            waiting = ",".join(p.address for p in fresh if p not in self.promises)
            founders = {p: self.peers[p][0] for p in self.promises}
            founders[self.ctx.identity] = self.ctx.lite
            if self._may_found(founders):
                left_ms = max(0, self.proposing_since_ms + bootstrap_ms - now)
                return (
                    f"proposing round {self.round}: {len(self.promises)} peers promised, enough to found; founding "
                    f"when the other peers found promise too, or in {left_ms} ms"
                ), waiting
            return (
                f"proposing round {self.round}: {len(self.promises)} peers promised; a founding needs "
                f"{config.initial_cluster_size} processes with a data member among them, at more than half of "
                f"the {len(self.seeds)} seed addresses{also}"
            ), waiting
        if missing:
            return f"found {found} of the {config.initial_cluster_size} processes initial_cluster_size needs{also}", ""
        at_seeds = len(({p.address for p in fresh} | {self.ctx.identity.address}) & self.seeds)
        if at_seeds < seeds_needed:
            return (
                f"{at_seeds} seed addresses answered as peers, more than half of {len(self.seeds)} needed{also}"
            ), ""
        if self.ctx.lite and all(self.peers[p][0] for p in fresh):
            return "no data member among the processes found", ""
        first = min([*fresh, self.ctx.identity], key=self._order)
        contact_ms = self.first_contact_ms if self.first_contact_ms is not None else now
        may_at = max(self.started_ms + bootstrap_ms, contact_ms + bootstrap_ms, self._no_proposal_before_ms)
        if first == self.ctx.identity:
            return f"about to propose a founding (in {max(0, may_at - now)} ms at most)", ""
        # Not first, it waits bootstrap_after_ms more from when it may propose (or did reach that).
        enough_ms = self._enough_since_ms if self._enough_since_ms is not None else may_at
        may_at = max(may_at, enough_ms + bootstrap_ms)
        return (
            f"waiting for a founding proposal from {first.address}, the first of the processes found (proposing "
            f"itself in {max(0, may_at - now)} ms if none comes)"
        ), first.address
