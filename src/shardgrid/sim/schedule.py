"""Fault schedules: scripted faults from a TOML or JSON file, alone or on top of random ones.

A schedule lets a user, or a tester outside the project, reproduce a fault pattern without writing
Python. Its ``[run]`` table sets the simulation (the same fields as ``shardgrid sim``'s options),
and its ``[[step]]`` list is carried out in order once the cluster is up and safe and the load has
started. A step fires

- ``at_ms`` after the schedule started, or ``after_ms`` after the previous step fired, or
- ``when`` a member has just handled a message of a given type (optionally only at, or from, a
  given member, only the ``nth`` such message, and only where ``require`` holds),

and then does its ``action`` to members named by reference:

- ``m1``, ``m2``, ...: the members in the order they were started (joins take the next numbers);
- ``leader``: the current leader; ``owner:17``: the owner of partition 17; ``backup:17``: its
  first backup; ``owner-of-most``;
  ``other``: a member other than the leader, drawn from the run's seed; ``most-complete-log``:
  the live member whose log is the most up to date (whom an operator recovers from);
- ``receiver`` and ``sender``: the members that handled and sent the triggering message;
  ``source``, ``destination``, ``owner``: those of the migration the triggering message is about;
- ``rest``: in a ``split``, every member not named in another group.

A ``require`` entry is ``"<ref> != <ref>"``, ``"<ref> == <ref>"`` or ``"<ref> exists"``.

Actions: ``crash`` (``drop_in_flight``: what it sent and is still on the wire dies too, except
to ``keep_to``), ``restart`` (at the same address; ``isolated`` keeps it cut off until a heal; ``as_itself``:
a persistent member comes back from its disk), ``move`` (a persistent member, killed first if it
runs, comes back from its disk at a new address: the next ``m`` number names it there),
``pause`` and ``resume``, ``split`` (``groups``, which may name clients, ``client-1`` ...;
``hold_ms``: what a client and a member send each other across it is held and arrives after the
heal, up to that much later, instead of being lost), ``isolate``, ``heal``, ``drop`` (the next
``count`` messages of the listed ``messages`` types, each ``every``-th of them, optionally only
``from``/``to`` given members, or all of them for ``duration_ms``), ``join`` (``lite``; ``seeds``
to start it with only those addresses), ``shutdown`` (graceful; ``signal``: as a process given
SIGTERM, StopSignalled), ``state`` (``state``), ``promote``, ``shutdown-cluster``, ``load`` (``ops`` more
operations over ``clients`` new clients),
``wait-safe`` and ``wait`` (do nothing).
``recover`` (the operator's recovery from a lost majority of voters, at ``target``).
``split``, ``isolate``, ``pause`` and ``drop`` take an optional ``duration_ms`` after which they
are undone.

``[expect]`` may allow lost partitions (``partitions_lost = true``, for schedules that lose more
members than the backups cover) or say that the run ends with the cluster shut down
(``cluster_stopped = true``).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardgrid.core import messages as m
from shardgrid.core.codec import FRAME_TYPES
from shardgrid.core.errors import ConfigError, require
from shardgrid.core.metadata import ClusterState
from shardgrid.sim.cluster import Simulation

ACTIONS = (
    "crash",
    "restart",
    "move",
    "pause",
    "resume",
    "split",
    "isolate",
    "heal",
    "drop",
    "join",
    "shutdown",
    "state",
    "promote",
    "shutdown-cluster",
    "recover",
    "load",
    "wait-safe",
    "wait",
)


def _is(cls: type) -> Callable[[Any], bool]:
    return lambda message: isinstance(message, cls)


def _transfer(cls: type, kind: m.TransferKind) -> Callable[[Any], bool]:
    return lambda message: isinstance(message, cls) and message.kind is kind


# What a step may name a message by: each message type by its name, and a transfer's chunks and
# acknowledgements by what they move (a migration's or a replica sync's).
MESSAGE_TYPES: dict[str, Callable[[Any], bool]] = {cls.__name__: _is(cls) for cls in FRAME_TYPES} | {
    "MigrationChunk": _transfer(m.TransferChunk, m.MIGRATION),
    "MigrationChunkAck": _transfer(m.TransferAck, m.MIGRATION),
    "ReplicaSyncChunk": _transfer(m.TransferChunk, m.SYNC),
    "ReplicaSyncAck": _transfer(m.TransferAck, m.SYNC),
}
_RUN_FIELDS = {
    "seed",
    "members",
    "lite_members",
    "partitions",
    "backups",
    "async_backups",
    "cache_map",
    "cache_eviction",
    "fail_on_indeterminate",
    "operation_call_timeout_ms",
    "attempt_timeout_ms",
    "ops",
    "clients",
    "keys_per_client",
    "faults",
    "max_parallel_migrations",
    "drop_rate",
    "duplicate_rate",
    "initial_cluster_size",
    "max_voters",
    "assign_on_first_use",
    "encode_messages",
    "settle_ms",
    "snapshot_every_entries",
    "join",
    "partition_lost_timeout_ms",
    "max_memory_bytes",
    "ttl_map",
    "clock_skew_ms",
    "compare_and_set",
    "idle_map",
    "persistent",
    "disk_sync_ms",
    "disk_capacity_bytes",
    "disk_reserve_bytes",
    "fsync",
    "fsync_interval_ms",
    "hot_restart_timeout_ms",
    "hot_restart_policy",
    "compaction_min_bytes",
    "compaction_bytes_per_step",
}
_STEP_FIELDS = {
    "action",
    "at_ms",
    "after_ms",
    "when",
    "target",
    "drop_in_flight",
    "keep_to",
    "isolated",
    "as_itself",
    "duration_ms",
    "groups",
    "hold_ms",
    "messages",
    "from",
    "to",
    "count",
    "every",
    "lite",
    "seeds",
    "state",
    "ops",
    "clients",
    "signal",
    "note",
}
_TRIGGER_FIELDS = {"message", "at", "from", "nth", "require"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Trigger:
    message: str
    at: str | None = None
    sender: str | None = None
    nth: int = 1
    require: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    action: str
    at_ms: int | None = None
    after_ms: int | None = None
    when: Trigger | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        timing = (
            f"at {self.at_ms} ms"
            if self.at_ms is not None
            else f"{self.after_ms} ms later"
            if self.after_ms is not None
            else f"when {self.when.message} is handled"
            if self.when is not None
            else "at once"
        )
        details = ", ".join(f"{k}={v}" for k, v in sorted(self.options.items()) if k != "note")
        return f"{self.action} {timing}" + (f" ({details})" if details else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    name: str
    run: dict[str, Any]
    steps: tuple[Step, ...]
    partitions_lost: bool = False
    cluster_stopped: bool = False


def load_schedule(path: str | Path) -> Schedule:
    """Read and check a schedule file (``.toml`` or ``.json``); a bad one is a ``ConfigError``
    that names the step and the field."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read schedule {path}: {error.strerror}") from error
    try:
        raw = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {error}") from error
    return parse_schedule(raw, path.stem)


def parse_schedule(raw: dict[str, Any], name: str) -> Schedule:
    unknown = set(raw) - {"run", "step", "expect", "name", "description"}
    require(not unknown, f"schedule {name}: unknown table(s) {sorted(unknown)}")
    run = dict(raw.get("run", {}))
    bad = set(run) - _RUN_FIELDS
    require(not bad, f"schedule {name}: unknown [run] field(s) {sorted(bad)}; known: {sorted(_RUN_FIELDS)}")
    if "join" in run:
        _check_join_lists(run["join"], run.get("members"), name)
    steps = tuple(_parse_step(i + 1, s, name) for i, s in enumerate(raw.get("step", [])))
    expect = raw.get("expect", {})
    bad = set(expect) - {"partitions_lost", "cluster_stopped"}
    require(not bad, f"schedule {name}: unknown [expect] field(s) {sorted(bad)}")
    return Schedule(
        name=str(raw.get("name", name)),
        run=run,
        steps=steps,
        partitions_lost=bool(expect.get("partitions_lost", False)),
        cluster_stopped=bool(expect.get("cluster_stopped", False)),
    )


# Member references that name no started member by number (see the module's docstring).
_NAMED_REFERENCES = (
    "leader",
    "other",
    "owner-of-most",
    "most-complete-log",
    "receiver",
    "sender",
    "source",
    "destination",
    "owner",
)
_REFERENCE_PATTERN = re.compile(r"m[1-9][0-9]*|(?:owner|backup):[0-9]+|client-[1-9][0-9]*")
# Step fields whose values are member references (one, or a list of them).
_REFERENCE_FIELDS = ("target", "keep_to", "seeds", "from", "to")


def reference_problem(ref: object) -> str:
    """Why ``ref`` can never name a member ('' when it may): a typo such as ``leadr`` or a
    name this simulator does not know (``master``) is a bad schedule, said before it runs, not a
    traceback halfway through (found by an outside tester)."""
    if not isinstance(ref, str):
        return f"{ref!r} is not a member reference"
    ref = ref.strip()
    if ref in _NAMED_REFERENCES or _REFERENCE_PATTERN.fullmatch(ref):
        return ""
    return (
        f"unknown member reference {ref!r}; use m1, m2, ... (in start order), "
        f"{', '.join(_NAMED_REFERENCES)}, owner:<partition>, backup:<partition> or client-<n>"
    )


def _references_of(step: Step) -> list[object]:
    """Every member reference a step names, in its fields and its trigger."""
    refs: list[object] = []
    for key in _REFERENCE_FIELDS:
        value = step.options.get(key)
        if value is not None:
            refs.extend(value if isinstance(value, list) else [value])
    for group in step.options.get("groups", []):
        if group != "rest" and group != ["rest"]:
            refs.extend(group if isinstance(group, list) else [group])
    if step.when is not None:
        refs.extend(ref for ref in (step.when.at, step.when.sender) if ref is not None)
        for condition in step.when.require:
            parts = _condition_parts(condition)
            if parts is not None:
                refs.extend(ref for ref in (parts[0], parts[2]) if ref)
    return refs


def check_schedule(schedule: Schedule, *, members: int, partitions: int, random_joins: bool) -> None:
    """Check ``schedule`` against the run it is given to (``shardgrid sim`` may override the
    file's member count): one join list per founding member, and no reference to a member that
    is never started (``m9`` of three members and no join step) or to a partition that does not
    exist. A ``ConfigError`` says which; found by an outside tester (an IndexError traceback for
    join lists given ``--members 4``)."""
    if "join" in schedule.run:
        _check_join_lists(schedule.run["join"], members, schedule.name)
    # A join, and a move (the member comes back at a new address), start the next m number.
    joins = sum(1 for step in schedule.steps if step.action in ("join", "move"))
    highest = None if random_joins else members + joins  # random joins start members of their own
    for number, step in enumerate(schedule.steps, start=1):
        for ref in _references_of(step):
            text = str(ref).strip()
            if highest is not None and re.fullmatch(r"m[1-9][0-9]*", text) and int(text[1:]) > highest:
                raise ConfigError(
                    f"schedule {schedule.name}, step {number}: {text} is never started "
                    f"({members} members and {joins} join or move step(s): m1..m{highest})"
                )
            if text.startswith(("owner:", "backup:")) and int(text.split(":", 1)[1]) >= partitions:
                raise ConfigError(
                    f"schedule {schedule.name}, step {number}: {text}: there are {partitions} partitions, "
                    f"0..{partitions - 1}"
                )


def _check_join_lists(join: object, members: object, name: str) -> None:
    """``join``: one list per founding member (``members`` of them) of member references m1..mN."""
    where = f"schedule {name}, [run] join"
    require(isinstance(members, int), f"{where}: give members too")
    lists = f"{len(join)} lists" if isinstance(join, list) else "not a list of lists"
    require(
        isinstance(join, list) and len(join) == members, f"{where}: one list per member: {members} members, {lists}"
    )
    for refs in join:
        require(isinstance(refs, list) and refs, f"{where}: each member's list names at least one member")
        for ref in refs:
            ok = isinstance(ref, str) and re.fullmatch(r"m[1-9][0-9]*", ref) is not None
            require(ok and 1 <= int(ref[1:]) <= members, f"{where}: {ref!r} is not one of m1..m{members}")


def _parse_step(number: int, raw: dict[str, Any], name: str) -> Step:
    where = f"schedule {name}, step {number}"
    require(isinstance(raw, dict), f"{where}: a step is a table")
    bad = set(raw) - _STEP_FIELDS
    require(not bad, f"{where}: unknown field(s) {sorted(bad)}")
    action = raw.get("action")
    require(action in ACTIONS, f"{where}: action must be one of {', '.join(ACTIONS)}, got {action!r}")
    timings = [k for k in ("at_ms", "after_ms", "when") if k in raw]
    require(len(timings) <= 1, f"{where}: give at most one of at_ms, after_ms and when")
    trigger = None
    if "when" in raw:
        when = raw["when"]
        require(isinstance(when, dict) and "message" in when, f"{where}: when needs a message type")
        bad = set(when) - _TRIGGER_FIELDS
        require(not bad, f"{where}: unknown when field(s) {sorted(bad)}")
        require(when["message"] in MESSAGE_TYPES, f"{where}: unknown message type {when['message']!r}")
        nth = when.get("nth", 1)
        require(isinstance(nth, int) and nth >= 1, f"{where}: nth must be a positive integer")
        conditions = tuple(when.get("require", ()))
        for condition in conditions:
            require(_condition_parts(condition) is not None, f"{where}: cannot read condition {condition!r}")
        trigger = Trigger(
            message=when["message"], at=when.get("at"), sender=when.get("from"), nth=nth, require=conditions
        )
    for key in ("at_ms", "after_ms", "duration_ms", "count", "every", "ops", "clients", "hold_ms"):
        if key in raw:
            require(isinstance(raw[key], int) and raw[key] >= 0, f"{where}: {key} must be a whole number >= 0")
    if "messages" in raw:
        unknown = [t for t in raw["messages"] if t not in MESSAGE_TYPES]
        require(not unknown, f"{where}: unknown message type(s) {unknown}")
    if action == "state":
        try:
            ClusterState.parse(str(raw.get("state", "")))
        except ValueError as error:
            raise ConfigError(f"{where}: {error}") from error
    if action == "split":
        groups = raw.get("groups")
        require(isinstance(groups, list) and len(groups) >= 2, f"{where}: split needs at least two groups")
    if action in ("crash", "restart", "move", "pause", "resume", "isolate", "shutdown", "promote", "recover"):
        require("target" in raw, f"{where}: {action} needs a target")
    options = {k: v for k, v in raw.items() if k not in ("action", "at_ms", "after_ms", "when")}
    step = Step(action=action, at_ms=raw.get("at_ms"), after_ms=raw.get("after_ms"), when=trigger, options=options)
    for ref in _references_of(step):
        problem = reference_problem(ref)
        require(not problem, f"{where}: {problem}")
    return step


def _condition_parts(condition: str) -> tuple[str, str, str] | None:
    for operator in ("!=", "=="):
        if operator in condition:
            left, right = (part.strip() for part in condition.split(operator, 1))
            return (left, operator, right) if left and right else None
    if condition.strip().endswith(" exists"):
        return (condition.strip()[: -len(" exists")].strip(), "exists", "")
    return None


@dataclass(slots=True)
class Context:
    """What the triggering message lets a step refer to."""

    receiver: str | None = None
    sender: str | None = None
    message: Any = None


class ScheduleRunner:
    """Carries a schedule's steps out on a running simulation, one after the other."""

    def __init__(self, schedule: Schedule, sim: Simulation, on_step: Callable[[str], None]) -> None:
        self.schedule = schedule
        self.sim = sim
        self.on_step = on_step
        self.next_step = 0
        self.origin_ms = 0
        self.last_fired_ms = 0
        self.fired: list[str] = []
        self.waiting_since_ms = 0
        self.undo_until_ms = 0  # a split, pause, isolation or drop still lasts until then

    @property
    def done(self) -> bool:
        steps_fired = self.next_step >= len(self.schedule.steps)
        return steps_fired and self.sim.now_ms >= self.undo_until_ms

    def waiting_for(self) -> str:
        if self.next_step < len(self.schedule.steps):
            return self.schedule.steps[self.next_step].describe()
        return "" if self.done else f"the last step's duration, until {self.undo_until_ms} ms"

    def start(self) -> None:
        self.origin_ms = self.last_fired_ms = self.sim.now_ms
        self._arm()

    # --- arming and firing -------------------------------------------------------------------------

    def _arm(self) -> None:
        if self.next_step >= len(self.schedule.steps):
            return
        step = self.schedule.steps[self.next_step]
        self.waiting_since_ms = self.sim.now_ms
        index = self.next_step
        if step.when is not None:
            self._install_trigger(index, step.when)
        elif step.at_ms is not None:
            self.sim.at(max(self.sim.now_ms, self.origin_ms + step.at_ms), lambda: self._fire(index, Context()))
        elif step.after_ms is not None:
            self.sim.at(self.last_fired_ms + step.after_ms, lambda: self._fire(index, Context()))
        else:
            self._fire(index, Context())

    def _install_trigger(self, index: int, trigger: Trigger) -> None:
        wanted = MESSAGE_TYPES[trigger.message]
        seen = [0]

        def hook(address: str, sender: str | None, message: Any) -> None:
            if self.next_step != index or not wanted(message):
                return
            context = Context(address, sender, message)
            if trigger.at is not None and self._resolve(trigger.at, context) != address:
                return
            if trigger.sender is not None and self._resolve(trigger.sender, context) != sender:
                return
            if not all(self._holds(condition, context) for condition in trigger.require):
                return
            seen[0] += 1
            if seen[0] < trigger.nth:
                return
            self.sim.after_delivery.remove(hook)
            self._fire(index, context)

        self.sim.after_delivery.append(hook)

    def _fire(self, index: int, context: Context) -> None:
        if index != self.next_step:
            return
        step = self.schedule.steps[index]
        self.next_step += 1
        self.last_fired_ms = self.sim.now_ms
        if step.action == "wait-safe":
            self._wait_safe(index)
            return
        what = self._do(step, context)
        line = f"{self.sim.now_ms}: step {index + 1}: {what}"
        self.fired.append(line)
        self.on_step(line)
        self._arm()

    def _wait_safe(self, index: int) -> None:
        from shardgrid.sim.checkers import unsafe_reason

        if unsafe_reason(self.sim):
            self.next_step = index  # not yet: look again shortly
            self.sim.at(self.sim.now_ms + 100, lambda: self._fire(index, Context()))
            return
        self.fired.append(f"{self.sim.now_ms}: step {index + 1}: the cluster is safe")
        self._arm()

    # --- references --------------------------------------------------------------------------------

    def _resolve(self, ref: str, context: Context) -> str | None:
        """The address a reference names now, or None when it names nobody."""
        sim = self.sim
        ref = ref.strip()
        if ref.startswith("m") and ref[1:].isdigit():
            number = int(ref[1:])
            addresses = sim.started_addresses
            return addresses[number - 1] if 0 < number <= len(addresses) else None
        leader = sim.leader()
        if ref.startswith("client-"):
            return ref if ref in sim.clients else None  # a client: a split may cut it off with some members
        if ref == "leader":
            return leader.identity.address if leader is not None else None
        if ref in ("receiver", "sender"):
            return context.receiver if ref == "receiver" else context.sender
        table = leader.consensus.state.table if leader is not None else None
        if ref.startswith("owner:"):
            owner = table.owner(int(ref.split(":", 1)[1])) if table is not None else None
            return owner.address if owner is not None else None
        if ref.startswith("backup:"):
            slots = table.replicas[int(ref.split(":", 1)[1])] if table is not None else ()
            return slots[1].address if len(slots) > 1 and slots[1] is not None else None
        if ref == "owner-of-most":
            if table is None:
                return None
            counts: dict[str, int] = {}
            for slots in table.replicas:
                if slots[0] is not None:
                    counts[slots[0].address] = counts.get(slots[0].address, 0) + 1
            return max(sorted(counts), key=lambda a: counts[a]) if counts else None
        if ref == "most-complete-log":
            live = [n.member for n in sim.nodes.values() if n.alive and not n.paused and n.member.joined]
            if not live:
                return None
            best = max(live, key=lambda x: (x.consensus.raft.log.last_term, x.consensus.raft.log.last_index))
            return best.identity.address
        if ref == "other":
            others = sorted(a for a in sim.member_addresses() if leader is None or a != leader.identity.address)
            return sim.rng.choice(others) if others else None
        if ref in ("source", "destination", "owner"):
            return self._of_migration(ref, context)
        raise ConfigError(f"unknown member reference {ref!r}")

    def _of_migration(self, role: str, context: Context) -> str | None:
        message = context.message
        record = getattr(message, "record", None) or getattr(message, "migration", None)
        leader = self.sim.leader()
        if record is None and leader is not None:
            migration_id = getattr(message, "migration_id", None)
            if isinstance(message, m.TransferAck) and message.kind is m.MIGRATION:
                migration_id = message.transfer_id
            state = leader.consensus.state
            candidates = [*state.migrations.values(), *reversed(state.completed)]
            record = next((r for r in candidates if r.migration_id == migration_id), None)
        if record is None:
            return None
        if role == "owner":
            table = leader.consensus.state.table if leader is not None else None
            owner = table.owner(record.partition_id) if table is not None else None
            return owner.address if owner is not None else None
        member = record.migration.source if role == "source" else record.migration.destination
        return member.address if member is not None else None

    def _holds(self, condition: str, context: Context) -> bool:
        parts = _condition_parts(condition)
        if parts is None:
            return False
        left, operator, right = parts
        value = self._resolve(left, context)
        if operator == "exists":
            return value is not None
        other = self._resolve(right, context)
        return value is not None and (value == other) == (operator == "==")

    def _targets(self, refs: Any, context: Context) -> list[str]:
        names = refs if isinstance(refs, list) else [refs]
        found = [self._resolve(str(name), context) for name in names]
        return [a for a in found if a is not None]

    # --- actions -----------------------------------------------------------------------------------

    def _do(self, step: Step, context: Context) -> str:
        sim = self.sim
        o = step.options
        action = step.action
        duration = o.get("duration_ms")
        if duration is not None:
            self.undo_until_ms = max(self.undo_until_ms, sim.now_ms + duration)
        if action in ("crash", "pause", "resume", "isolate", "shutdown", "promote", "restart", "recover", "move"):
            targets = self._targets(o["target"], context)
            if not targets:
                return f"{action}: {o['target']} names no member now"
            address = targets[0]
            if action == "crash":
                keep = tuple(self._targets(o.get("keep_to", []), context))
                sim.crash(address, drop_in_flight=bool(o.get("drop_in_flight", False)), keep_to=keep)
            elif action == "restart":
                sim.restart(address, isolated=bool(o.get("isolated", False)), as_itself=bool(o.get("as_itself", False)))
            elif action == "move":
                return f"move {address} to {sim.move(address)}"
            elif action == "pause":
                sim.pause(address)
                if duration is not None:
                    sim.at(sim.now_ms + duration, lambda: sim.resume(address))
            elif action == "resume":
                sim.resume(address)
            elif action == "isolate":
                sim.isolate(address)
                if duration is not None:
                    sim.at(sim.now_ms + duration, sim.heal)
            elif action == "shutdown":
                # ``signal``: as a member process given SIGTERM (it stops even as the last).
                if o.get("signal", False):
                    sim.signal_stop(address)
                else:
                    sim.admin(address, m.ShutdownMember())
            elif action == "recover":
                sim.admin(address, m.RecoverLostMajority())
            else:
                sim.admin(address, m.PromoteMember())
            return f"{action} {address}"
        if action == "split":
            named: list[list[str]] = []
            rest_at = -1
            for group in o["groups"]:
                if group == ["rest"] or group == "rest":
                    rest_at = len(named)
                    named.append([])
                else:
                    named.append(self._targets(group, context))
            if rest_at >= 0:
                taken = {a for g in named for a in g}
                named[rest_at] = [a for a in sim.nodes if a not in taken]
            sim.split(named, hold_ms=int(o.get("hold_ms", 0)))
            if duration is not None:
                sim.at(sim.now_ms + duration, sim.heal)
            return f"split {named}"
        if action == "heal":
            sim.heal()
            return "heal"
        if action == "drop":
            return self._drop(step, context)
        if action == "join":
            seeds = tuple(self._targets(o["seeds"], context)) if "seeds" in o else None
            address = sim.start_member(lite=bool(o.get("lite", False)), seeds=seeds)
            return f"join {address}" + (" (lite)" if o.get("lite") else "")
        if action in ("state", "shutdown-cluster"):
            targets = self._targets(o.get("target", "leader"), context) or sim.member_addresses()[:1]
            if not targets:
                return f"{action}: no member to ask"
            if action == "state":
                state = ClusterState.parse(str(o["state"]))
                sim.admin(targets[0], m.ChangeClusterState(state))
                return f"ask {targets[0]} for cluster state {state.value}"
            sim.admin(targets[0], m.ShutdownCluster())
            return f"ask {targets[0]} to shut the cluster down"
        if action == "load":
            clients = [sim.add_client() for _ in range(int(o.get("clients", 1)))]
            ops = int(o.get("ops", 100))
            for i, client in enumerate(clients):
                client.give(ops // len(clients) + (1 if i < ops % len(clients) else 0))
            return f"load {ops} more operations"
        return "wait"

    def _drop(self, step: Step, context: Context) -> str:
        sim = self.sim
        o = step.options
        types = tuple(MESSAGE_TYPES[t] for t in o.get("messages", ()))
        sources = set(self._targets(o["from"], context)) if "from" in o else None
        targets = set(self._targets(o["to"], context)) if "to" in o else None
        count = o.get("count")
        every = max(1, int(o.get("every", 1)))
        until_ms = sim.now_ms + o["duration_ms"] if "duration_ms" in o else None
        matched = [0]

        def rule(source: str, target: str, message: Any) -> bool:
            if until_ms is not None and sim.now_ms >= until_ms:
                return False
            if types and not any(matches(message) for matches in types):
                return False
            if sources is not None and source not in sources:
                return False
            if targets is not None and target not in targets:
                return False
            if count is not None and matched[0] >= count:
                return False
            matched[0] += 1
            return (matched[0] - 1) % every == 0

        sim.drop_rules.append(rule)
        names = ",".join(o.get("messages", ())) or "every message"
        return f"drop {names}" + (f" for {o['duration_ms']} ms" if until_ms is not None else "")
