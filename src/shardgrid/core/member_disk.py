"""A persistent member's data directory as the core reads it back: who it is, its Raft storage
and its replicas, from the bytes of its files (the runtime reads the files, the simulator keeps
them in memory; both hand them here).

A member comes back as itself only with all of it: an identity without its Raft storage could vote
twice in a term, and one without its replicas would serve empty partitions it owns. A directory
whose Raft file holds no snapshot is a member that never held its cluster's log (it joined no
cluster, or crashed before its first write reached the disk): it starts as a new member.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import msgspec

from shardgrid.core.disk_records import RecordKind, Scan, encode_record, refuse_corrupt, scan_records
from shardgrid.core.effects import DiskFile
from shardgrid.core.errors import CorruptDisk
from shardgrid.core.identity import MemberId
from shardgrid.core.metadata import MetadataState
from shardgrid.core.raft.storage import RaftStorage
from shardgrid.core.raft_disk import raft_storage
from shardgrid.core.replica_disk import ReplicasOnDisk, load_replicas
from shardgrid.core.wire import Record

FORMAT_VERSION = 1  # of the data directory: a member refuses one written in a format it does not know


class MemberIdentity(Record, kw_only=True):
    format_version: int
    cluster_name: str
    member: MemberId


_IDENTITY = msgspec.msgpack.Decoder(MemberIdentity)
_ENCODER = msgspec.msgpack.Encoder()


def identity_record(member: MemberId, cluster_name: str) -> bytes:
    """The member file: written whole (replacing the one before) when an identity starts."""
    value = MemberIdentity(format_version=FORMAT_VERSION, cluster_name=cluster_name, member=member)
    return encode_record(RecordKind.MEMBER_IDENTITY, _ENCODER.encode(value))


def read_identity(scan: Scan, cluster_name: str, name: str = "the member file") -> MemberId | None:
    """The identity a scanned member file holds (None: no file, or one torn before its first
    sync); ``CorruptDisk`` for a damaged one or another cluster's."""
    refuse_corrupt(scan, name)
    if not scan.records:
        return None
    if len(scan.records) != 1 or scan.records[0][0] != RecordKind.MEMBER_IDENTITY:
        raise CorruptDisk(f"{name} holds {len(scan.records)} records, not one identity")
    try:
        value = _IDENTITY.decode(scan.records[0][1])
    except (msgspec.MsgspecError, ValueError, TypeError) as error:
        raise CorruptDisk(f"{name} is not one a member wrote: {error}") from error
    if value.format_version != FORMAT_VERSION:
        raise CorruptDisk(f"{name} is of format {value.format_version}; this member reads {FORMAT_VERSION}")
    if value.cluster_name != cluster_name:
        raise CorruptDisk(f"{name} is a member of cluster {value.cluster_name!r}, not {cluster_name!r}")
    return value.member


@dataclass(slots=True, kw_only=True)
class MemberDisk:
    """What a restarted member takes back: its Raft storage and its replicas, and what the files
    lost at their torn tails (what was written but never synced, so never acknowledged)."""

    raft: RaftStorage
    replicas: ReplicasOnDisk
    file_bytes: dict[DiskFile, int] = field(default_factory=dict)  # each file's intact length
    torn_bytes: dict[DiskFile, int] = field(default_factory=dict)
    # The identity the member file holds, when the process now listens at another address: the
    # member comes back as itself there only once the cluster renames it (``ReaddressMember``).
    # Until then it holds its replicas apart, unserved, and takes no part in the log.
    moved_from: MemberId | None = None

    @property
    def known_members(self) -> tuple[MemberId, ...]:
        """The members its log's snapshot lists (where to look for the cluster, and whom to hear)."""
        snapshot = self.raft.snapshot
        if snapshot is None or not isinstance(snapshot.state, MetadataState):
            return ()
        return snapshot.state.member_ids

    @property
    def known_addresses(self) -> tuple[str, ...]:
        return tuple(member.address for member in self.known_members)


def read_member_disk(
    scans: Mapping[DiskFile, Scan],
    *,
    hash_seed: int,
    max_idle_ms: Mapping[str, int],
    now_ms: int = 0,
) -> MemberDisk | None:
    """The member's state in its scanned files (None when it never wrote its Raft storage: it starts new);
    ``CorruptDisk`` naming the file for damage that is not a torn tail, or for what no member
    could have written."""
    empty = scan_records(b"")
    raft_scan = scans.get(DiskFile.RAFT, empty)
    if not raft_scan.records and not raft_scan.corrupt:
        return None
    raft = raft_storage(raft_scan, "the Raft file")
    if raft.snapshot is None:
        return None  # it never held a cluster's log (a term or a vote at most): it joins anew
    return _with_replicas(raft, raft_scan, scans.get(DiskFile.REPLICAS, empty), hash_seed, max_idle_ms, now_ms)


def _with_replicas(
    raft: RaftStorage,
    raft_scan: Scan,
    replica_scan: Scan,
    hash_seed: int,
    max_idle_ms: Mapping[str, int],
    now_ms: int,
    moved_from: MemberId | None = None,
) -> MemberDisk:
    replicas = load_replicas(replica_scan, hash_seed=hash_seed, max_idle_ms=max_idle_ms, now_ms=now_ms)
    return MemberDisk(
        raft=raft,
        replicas=replicas,
        file_bytes={DiskFile.RAFT: raft_scan.valid_bytes, DiskFile.REPLICAS: replicas.whole_bytes},
        torn_bytes={
            DiskFile.RAFT: raft_scan.torn_bytes,
            DiskFile.REPLICAS: replica_scan.torn_bytes + replica_scan.valid_bytes - replicas.whole_bytes,
        },
        moved_from=moved_from,
    )


def read_moved_disk(
    scans: Mapping[DiskFile, Scan],
    moved_from: MemberId,
    *,
    hash_seed: int,
    max_idle_ms: Mapping[str, int],
    now_ms: int = 0,
) -> MemberDisk:
    """The state of a member whose process now listens at another address than ``moved_from``'s:
    its replicas, and of its Raft file only what says where the cluster was and how far its log
    was committed (it takes the log afresh from the cluster once renamed: its file may even be a
    fresh log, written after an earlier start at the new address that did not get that far).
    ``CorruptDisk`` as for ``read_member_disk``."""
    empty = scan_records(b"")
    raft_scan = scans.get(DiskFile.RAFT, empty)
    raft = raft_storage(raft_scan, "the Raft file") if raft_scan.records or raft_scan.corrupt else RaftStorage()
    voters = _last_voters(raft)
    if voters and set(voters) <= {moved_from}:
        raise CorruptDisk(
            f"the directory holds member {moved_from.uuid} of a cluster it is the only voter of, at "
            f"{moved_from.address}: start it there (a member comes back at another address only while a "
            "majority of its cluster's voters runs, to rename it)"
        )
    replica_scan = scans.get(DiskFile.REPLICAS, empty)
    return _with_replicas(raft, raft_scan, replica_scan, hash_seed, max_idle_ms, now_ms, moved_from)


def _last_voters(raft: RaftStorage) -> tuple[MemberId, ...]:
    """The voters of the newest configuration the stored log holds (none without a log)."""
    if raft.snapshot is None:
        return ()
    membership = raft.snapshot.membership
    for entry in raft.entries:
        if entry.forced is not None:
            membership = entry.forced
        elif entry.change is not None and not entry.change.problem(membership):
            membership = entry.change.apply(membership)
    return membership.voters


def refuse_orphaned_data(
    identity: MemberId | None, disk: MemberDisk | None, scans: Mapping[DiskFile, Scan], directory: str
) -> None:
    """``CorruptDisk`` for a directory that holds a member's data but not the member (its member
    file or its Raft log gone or cut short): started as a new member there, a process would
    write over the data (found by an outside tester), and restarted as one that lost its log it
    could vote twice. A member that stopped for good emptied its log and dropped every copy."""
    if disk is not None:
        return
    replicas = scans.get(DiskFile.REPLICAS)
    held = load_replicas(replicas, hash_seed=0, max_idle_ms={}) if replicas is not None and replicas.records else None
    if held is not None and (held.copies or held.staged):
        what = "no member file" if identity is None else "a Raft file with no log"
        raise CorruptDisk(
            f"{directory} holds {len(held.copies)} replicas but {what}: it is damaged (or copied in part); "
            "move it away to start a new member here"
        )
    raft = scans.get(DiskFile.RAFT)
    if identity is None and raft is not None and raft.records:
        raise CorruptDisk(f"{directory} holds a Raft log but no member file: it is damaged (or copied in part)")
