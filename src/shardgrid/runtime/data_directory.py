"""A member process's data directory (``data_dir``): the files its core writes through ``Persist``
effects, synced once for all a loop turn wrote, and read back at a restart.

Three files of records (``runtime/record_file.py``), each locked while the process runs:

- ``member``: who the member is (its uuid, address and cluster), written whole when an identity
  starts; a restart with the other files comes back as that member;
- ``raft``: the Raft hard state, log and snapshots (``core/raft_disk.py``);
- ``replicas``: every replica the member holds, as images and write runs (``core/replica_disk.py``).

What the files hold is read by the core's own readers (``core/member_disk.py``), exactly as the
simulator reads its members' disks; this module only opens, writes, syncs and closes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

from shardgrid.core.disk_records import Scan
from shardgrid.core.effects import DiskFile, Persist, WriteMode
from shardgrid.core.identity import MemberId
from shardgrid.core.member_disk import (
    MemberDisk,
    identity_record,
    read_identity,
    read_member_disk,
    read_moved_disk,
    refuse_orphaned_data,
)
from shardgrid.runtime.record_file import DiskFailed, RecordFile

MEMBER_FILE = "member"


class DataDirectory:
    """The open files of one member's data directory. One owner: its member process."""

    def __init__(self, path: Path, member_file: RecordFile, files: Mapping[DiskFile, RecordFile]) -> None:
        self.path = path
        self._member_file = member_file
        self._files = dict(files)
        self._unsynced: set[DiskFile] = set()
        self.written = 0  # Persist effects carried out (what the member's Synced counts)
        self.synced = 0  # of which this many are durable

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        address: str,
        cluster_name: str,
        hash_seed: int,
        max_idle_ms: Mapping[str, int],
        now_ms: int,
    ) -> tuple[DataDirectory, MemberId | None, MemberDisk | None]:
        """Open (or make) the directory and read it: the identity it holds and what the member
        left (both None for a new member; ``MemberDisk.moved_from`` set when the identity is at
        another address than ``address``). ``CorruptDisk`` names a damaged file, and a directory
        of another cluster; ``DiskFailed`` a directory another process holds."""
        opened: list[RecordFile] = []
        try:
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
            member_file, member_scan = RecordFile.open(path / MEMBER_FILE, accept=False)
            opened.append(member_file)
            scans: dict[DiskFile, Scan] = {}
            files: dict[DiskFile, RecordFile] = {}
            for file in DiskFile:
                files[file], scans[file] = RecordFile.open(path / file.value, accept=False)
                opened.append(files[file])
            identity = read_identity(member_scan, cluster_name, str(path / MEMBER_FILE))
            disk = None
            if identity is not None and identity.address != address:
                # Moved: it asks its cluster to rename it here (its member file keeps the old
                # address until the cluster has), holding its replicas meanwhile.
                disk = read_moved_disk(scans, identity, hash_seed=hash_seed, max_idle_ms=max_idle_ms, now_ms=now_ms)
            elif identity is not None:
                disk = read_member_disk(scans, hash_seed=hash_seed, max_idle_ms=max_idle_ms, now_ms=now_ms)
            refuse_orphaned_data(identity, disk, scans, str(path))
            for record_file in opened:  # refused by nothing: taken to write on
                record_file.accept()
            if disk is not None:
                # A step torn off the replicas file is cut before the file is written again.
                files[DiskFile.REPLICAS].truncate(disk.file_bytes[DiskFile.REPLICAS])
            else:
                identity = None  # it never held its cluster's log: it starts as a new member
        except BaseException as error:
            for record_file in opened:
                with contextlib.suppress(OSError):
                    record_file.close()
            if isinstance(error, OSError):
                raise DiskFailed(f"{path}: {error.strerror or error}") from error
            raise
        return cls(path, member_file, files), identity, disk

    def set_identity(self, member: MemberId, cluster_name: str) -> None:
        """The identity this directory's state belongs to from now on (synced before it returns)."""
        self._member_file.replace(identity_record(member, cluster_name))

    def write(self, effect: Persist) -> None:
        """Carry out a ``Persist`` effect (``DiskFull`` when the disk refuses it)."""
        record_file = self._files[effect.file]
        self.written += 1
        mode = effect.mode
        if mode is WriteMode.APPEND:
            record_file.append(effect.data)
            self._unsynced.add(effect.file)
        elif mode is WriteMode.REPLACE:
            record_file.replace(effect.data)  # synced as it is written
        elif mode is WriteMode.BEGIN_NEXT:
            record_file.begin_next(effect.data)
        elif mode is WriteMode.APPEND_NEXT:
            record_file.append_next(effect.data)
        elif mode is WriteMode.ADOPT_NEXT:
            record_file.adopt_next()  # synced, then renamed into place, before it returns
        else:
            record_file.discard_next()

    @property
    def unsynced(self) -> bool:
        return bool(self._unsynced)

    def sync(self) -> float:
        """Sync every file written since the last sync (every write carried out is then durable):
        the seconds it took."""
        took = 0.0
        for file in sorted(self._unsynced, key=lambda f: f.value):
            took += self._files[file].sync()
        self._unsynced.clear()
        self.synced = self.written  # a replacement is synced as it is written
        return took

    def file_bytes(self) -> dict[DiskFile, int]:
        """Each file's bytes, a compaction's next file included."""
        return {file: f.size_bytes + f.next_bytes for file, f in self._files.items()}

    def free_bytes(self) -> int:
        """The free space of the file system the directory is on, as an unprivileged writer has it
        (-1 when it cannot be read)."""
        try:
            stats = os.statvfs(self.path)
        except OSError:
            return -1
        return stats.f_bavail * stats.f_frsize

    def close(self) -> None:
        for record_file in (self._member_file, *self._files.values()):
            with contextlib.suppress(OSError):
                record_file.close()
