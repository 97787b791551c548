"""How the core names a member.

A replica slot of the partition table holds a ``MemberId``: the member's uuid and address, as
Hazelcast's PartitionReplica does. The uuid makes a member that restarts on the same address a
different replica (its data is gone), and the address lets a table be read without the member
list. Whether a member is lite is a property of the member, not of a replica, so it lives in
``MemberInfo`` and never in the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import msgspec

from shardgrid.core.limits import MAX_MEMBER_COUNT
from shardgrid.core.wire import Record

# A uuid in its text form is 36 characters; an address is a host and a port.
MAX_UUID_CHARS = 64
MAX_ADDRESS_CHARS = 256


class MemberId(Record, order=True, gc=False):
    """A member as the partition table names it; ordered by uuid so sorting is deterministic.

    Not tracked by the garbage collector (two strings cannot make a cycle): a table's rows of
    them are then not tracked either, and a collection no longer walks 20,000 rows per table a
    member keeps (most of the slowest ``handle()`` at that size, in the simulator's one process)."""

    uuid: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_UUID_CHARS)]
    address: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ADDRESS_CHARS)]

    def __str__(self) -> str:
        return f"{self.address}/{self.uuid[:8]}"


# Here, beside MemberId, so that Raft's configurations, the log's commands and the messages carry one
# bound: the codec checks it before it builds a single replica of a list a peer made too long.
MemberIds = Annotated[tuple[MemberId, ...], msgspec.Meta(max_length=MAX_MEMBER_COUNT)]


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """A cluster member as repartitioning sees it.

    ``lite`` members take part in the cluster but own no partition replicas (seed 001, seed 002).
    """

    id: MemberId
    lite: bool = False
