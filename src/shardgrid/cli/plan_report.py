"""What ``shardgrid plan`` tells a user: the plan's size and shape, balance, and schedule length."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.console import Console
from rich.table import Table

from shardgrid.cli.scenario import ScenarioResult
from shardgrid.core.identity import MemberId
from shardgrid.core.migration import MigrationKind
from shardgrid.core.placement import replica_count_for
from shardgrid.core.table import PartitionTable


def _holdings(table: PartitionTable) -> tuple[Counter[MemberId], Counter[MemberId]]:
    primaries: Counter[MemberId] = Counter()
    backups: Counter[MemberId] = Counter()
    for slots in table.replicas:
        for index, member in enumerate(slots):
            if member is not None:
                (primaries if index == 0 else backups)[member] += 1
    return primaries, backups


def summarize(result: ScenarioResult) -> dict[str, Any]:
    """The plan as plain data: what ``--json`` prints and what the table view renders."""
    spec, plan = result.spec, result.plan
    by_kind: Counter[str] = Counter()
    moved_in: Counter[MemberId] = Counter()
    moved_out: Counter[MemberId] = Counter()
    for queue in plan.migrations.values():
        for migration in queue:
            by_kind[migration.kind.value] += 1
            if migration.destination is not None:
                moved_in[migration.destination] += 1
            if migration.source is not None:
                moved_out[migration.source] += 1
    before_p, before_b = _holdings(result.before)
    after_p, after_b = _holdings(plan.target)
    status = {m: "added" for m in result.added}
    status.update({m: "removed" for m in result.removed})
    status.update({m: "crashed" for m in result.crashed})
    everyone = sorted(set(result.before.members()) | set(result.members_after), key=lambda m: m.address)
    members = [
        {
            "address": m.address,
            "uuid": m.uuid,
            "status": status.get(m, "kept"),
            "before": {"primaries": before_p[m], "backups": before_b[m]},
            "after": {"primaries": after_p[m], "backups": after_b[m]},
            "in": moved_in[m],
            "out": moved_out[m],
        }
        for m in everyone
    ]
    data_members = list(result.members_after)
    replicas = replica_count_for(len(data_members), len(data_members), spec.backups)
    per_index = []
    worst_pct = 0.0
    for index in range(replicas):
        counts = Counter(slots[index] for slots in plan.target.replicas if slots[index] is not None)
        values = [counts[m] for m in data_members]
        average = spec.partitions / len(data_members)
        deviation = max(abs(v - average) for v in values) / average * 100
        worst_pct = max(worst_pct, deviation)
        per_index.append({"index": index, "min": min(values), "max": max(values), "average": round(average, 2)})
    rounds = result.rounds
    repair = result.repair
    return {
        "parameters": {
            "members": spec.members,
            "add": spec.add,
            "remove": spec.remove,
            "crash": spec.crash,
            "partitions": spec.partitions,
            "backups": spec.backups,
            "seed": spec.seed,
            "max_parallel_migrations": spec.max_parallel_migrations,
        },
        "repair": None
        if repair is None
        else {"promotions": len(repair.promotions), "lost_partitions": list(repair.lost_partitions)},
        "migrations": {
            "total": plan.migration_count,
            "partitions_migrating": len(plan.migrations),
            "by_kind": {kind.value: by_kind[kind.value] for kind in MigrationKind},
        },
        "members": members,
        "balance": {"per_replica_index": per_index, "max_deviation_pct": round(worst_pct, 2)},
        "schedule": {
            "rounds": len(rounds),
            "largest_round": max((len(r) for r in rounds), default=0),
            "max_parallel_migrations": spec.max_parallel_migrations,
        },
        "timings_ms": {
            "repartition_and_plan": round(result.plan_ms, 3),
            "schedule": round(result.schedule_ms, 3),
            "total": round(result.plan_ms + result.schedule_ms, 3),
        },
    }


def render(summary: dict[str, Any], console: Console) -> None:
    p = summary["parameters"]
    change = ", ".join(f"{word} {p[word]}" for word in ("add", "remove", "crash") if p[word]) or "no change"
    console.print(
        f"[bold]shardgrid plan[/bold]: {p['members']} members, {change}; {p['partitions']} partitions, "
        f"{p['backups']} backup(s), seed {p['seed']}"
    )
    repair = summary["repair"]
    if repair is not None:
        lost = repair["lost_partitions"]
        console.print(
            f"repair after the crash: {repair['promotions']} backups promoted to owner; "
            + (f"[red]{len(lost)} partitions lost every replica[/red]" if lost else "no partition lost")
        )
    migrations = summary["migrations"]
    kinds = Table(title=f"{migrations['total']} migrations in {migrations['partitions_migrating']} partitions")
    for kind in migrations["by_kind"]:
        kinds.add_column(kind, justify="right")
    kinds.add_row(*(str(n) for n in migrations["by_kind"].values()))
    console.print(kinds)

    members = Table(title="members")
    for column in ("member", "status", "primaries", "backups", "in", "out"):
        members.add_column(column, justify="left" if column in ("member", "status") else "right")
    for m in summary["members"]:
        members.add_row(
            f"{m['address']} {m['uuid'][:8]}",
            m["status"],
            f"{m['before']['primaries']} -> {m['after']['primaries']}",
            f"{m['before']['backups']} -> {m['after']['backups']}",
            str(m["in"]),
            str(m["out"]),
        )
    console.print(members)

    balance = summary["balance"]
    spread = "; ".join(
        f"index {b['index']}: {b['min']}..{b['max']} (avg {b['average']})" for b in balance["per_replica_index"]
    )
    console.print(f"balance per replica index: {spread}; worst deviation {balance['max_deviation_pct']}%")
    schedule = summary["schedule"]
    console.print(
        f"parallel schedule: {schedule['rounds']} rounds at most {schedule['max_parallel_migrations']} "
        f"migrations per member (largest round {schedule['largest_round']})"
    )
    t = summary["timings_ms"]
    console.print(f"time: repartition and plan {t['repartition_and_plan']} ms, schedule {t['schedule']} ms")
