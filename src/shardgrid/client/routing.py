"""Where each key goes, as pure functions over the client's view of the partition table.

The client keeps one ``TableView``: per partition, the owner's address and the partition version
it learned it at. Table replies and WRONG_OWNER redirects update it only forwards (a redirect
older than what the view holds is ignored), so a slow answer cannot route the client back to an
owner that has already handed the partition over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from shardgrid.core.limits import MAX_REQUEST_BYTES
from shardgrid.core.messages import PartitionRedirect, TableReply


@dataclass(slots=True)
class TableView:
    partition_count: int = 0
    owners: list[str | None] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    # Every replica's address per partition (the owner first), as the last table reply said: what
    # ``partitions()`` shows; routing reads ``owners``, which redirects and silences also move.
    replicas: list[tuple[str, ...]] = field(default_factory=list)
    unavailable: set[int] = field(default_factory=set)  # every replica on members that stopped answering
    members: list[str] = field(default_factory=list)  # every address a table reply named

    @property
    def known(self) -> bool:
        return self.partition_count > 0 and any(owner is not None for owner in self.owners)

    def apply_page(self, reply: TableReply) -> int | None:
        """Take one page of a table reply; returns the partition to ask from next, or None when the
        table is complete (or the member has none yet: then it changes nothing)."""
        if self.partition_count != reply.partition_count:
            self.partition_count = reply.partition_count
            self.owners = [None] * reply.partition_count
            self.versions = [-1] * reply.partition_count
            self.replicas = [()] * reply.partition_count
            self.unavailable = set()
        for address in reply.addresses:
            if address not in self.members:
                self.members.append(address)
        for offset, (version, row) in enumerate(zip(reply.versions, reply.replicas, strict=False)):
            pid = reply.first_partition + offset
            if pid >= self.partition_count or version < self.versions[pid]:
                continue
            owner = row[0] if row else -1
            self.owners[pid] = reply.addresses[owner] if 0 <= owner < len(reply.addresses) else None
            self.versions[pid] = version
            self.replicas[pid] = tuple(reply.addresses[i] for i in row if 0 <= i < len(reply.addresses))
            self.unavailable.discard(pid)
        for pid in reply.unavailable:
            if 0 <= pid < self.partition_count:
                self.owners[pid] = None  # its owner does not answer: any member says so at once
                self.unavailable.add(pid)
        if reply.more and reply.replicas:
            return reply.first_partition + len(reply.replicas)
        return None

    def apply_redirect(self, redirect: PartitionRedirect) -> None:
        pid = redirect.partition_id
        if 0 <= pid < self.partition_count and redirect.version >= self.versions[pid]:
            self.owners[pid] = redirect.owner_address
            self.versions[pid] = redirect.version

    def forget(self, pid: int) -> None:
        """The owner the view names did not answer: ask anyone until the table says otherwise."""
        if 0 <= pid < self.partition_count:
            self.owners[pid] = None


def group_by_owner(indexes: Sequence[int], pids: Sequence[int], view: TableView) -> dict[str | None, list[int]]:
    """``indexes`` (into a call's key column) grouped by the owner of their key's partition, each
    group in partition order (stable: a key named twice keeps its order), so that a member takes
    each partition's keys as one slice of the request; None gathers the keys whose owner the view
    does not know."""
    owners = view.owners
    known = len(owners)
    if not indexes:
        return {}
    if max(map(pids.__getitem__, indexes)) < known:  # every owner slot there: passes in C alone
        column = list(map(owners.__getitem__, map(pids.__getitem__, indexes)))
    else:
        column = [owners[pid] if pid < known else None for pid in map(pids.__getitem__, indexes)]
    if column.count(column[0]) == len(column):  # one owner (a batch the caller grouped already)
        groups = {column[0]: list(indexes)}
    else:
        groups = {}
        for index, owner in zip(indexes, column, strict=True):
            groups.setdefault(owner, []).append(index)
    for group in groups.values():
        group.sort(key=pids.__getitem__)
    return groups


def split_requests(
    indexes: Sequence[int], keys: Sequence[bytes], values: Sequence[bytes] | None, max_operations: int
) -> list[list[int]]:
    """``indexes`` cut into requests of at most ``max_operations`` keys and ``MAX_REQUEST_BYTES``
    of keys and values each, in order."""
    if len(indexes) <= max_operations:
        size = sum(map(len, map(keys.__getitem__, indexes)))
        if values is not None:
            size += sum(map(len, map(values.__getitem__, indexes)))
        if size <= MAX_REQUEST_BYTES:
            return [list(indexes)] if indexes else []  # it all fits one request (a pass in C, not in Python)
    batches: list[list[int]] = []
    current: list[int] = []
    size = 0
    for index in indexes:
        item = len(keys[index]) + (len(values[index]) if values is not None else 0)
        if current and (len(current) >= max_operations or size + item > MAX_REQUEST_BYTES):
            batches.append(current)
            current, size = [], 0
        current.append(index)
        size += item
    if current:
        batches.append(current)
    return batches
