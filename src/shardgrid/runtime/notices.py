"""A member's events as ``EventNotice``s for listening clients (migration listeners and the like).

The member emits events for its log (``Emit`` effects); the process pushes each to every client
that sent a ``ListenRequest`` on its connection. A client that does not keep up loses notices
(they are news, not state: ``status`` tells where things stand), never the member's time.
"""

from __future__ import annotations

from typing import Any

from shardgrid.core import events
from shardgrid.core.messages import EventNotice


def notice_of(event: Any, call_id: int) -> EventNotice | None:
    if isinstance(event, events.MigrationEvent):
        return EventNotice(
            call_id=call_id,
            kind="migration",
            phase=event.phase.value,
            partition_id=event.partition_id,
            migration_id=event.migration_id,
            migration_kind=event.kind,
            source=event.source.address if event.source is not None else "",
            destination=event.destination.address if event.destination is not None else "",
        )
    if isinstance(event, events.MemberAdded | events.MemberRemoved | events.MemberPromoted):
        kind = {
            events.MemberAdded: "member-added",
            events.MemberRemoved: "member-removed",
            events.MemberPromoted: "member-promoted",
        }[type(event)]
        return EventNotice(
            call_id=call_id, kind=kind, member=event.member.address, detail=f"log index {event.log_index}"
        )
    if isinstance(event, events.MemberReaddressed):
        detail = f"was {event.old.address}; log index {event.log_index}"
        return EventNotice(call_id=call_id, kind="member-readdressed", member=event.new.address, detail=detail)
    if isinstance(event, events.LeaderChanged):
        return EventNotice(
            call_id=call_id, kind="leader-changed", member=event.leader.address, detail=f"term {event.term}"
        )
    if isinstance(event, events.ClusterStateChanged):
        return EventNotice(call_id=call_id, kind="cluster-state-changed", detail=event.state.value)
    if isinstance(event, events.PartitionLost):
        detail = f"{event.lost_replica_count} replicas lost"
        return EventNotice(call_id=call_id, kind="partition-lost", partition_id=event.partition_id, detail=detail)
    return None
