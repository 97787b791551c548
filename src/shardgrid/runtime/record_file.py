"""One file of checksummed records (``core/disk_records``) on a member's disk: appended to, synced
once for all that was appended since the last sync (group commit), and replaced whole, atomically.

Opening a file reads it through: a torn tail (the process stopped mid-write) is cut off and the
cut synced, so the next record follows the last whole one; corruption is ``CorruptDisk`` naming the
file and the byte where it starts, and nothing is changed. A write the disk refuses (full, or the
file at its size limit) is ``DiskFull``: the file is cut back to where the write began, so it
still ends at a whole record and holds everything synced before.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from pathlib import Path

from shardgrid.core.disk_records import Scan, scan_records
from shardgrid.core.errors import CorruptDisk, ShardgridError

TEMPORARY_SUFFIX = ".new"  # a replacement being written: never read, removed at open


class DiskFull(ShardgridError):
    """The disk (or the file's size limit) refused a write; what the file held is intact."""


class RecordFile:
    """An open file of records. One owner: the member process's disk writer."""

    def __init__(self, path: Path, fd: int, size_bytes: int) -> None:
        self.path = path
        self._fd = fd
        self.size_bytes = size_bytes
        self._unsynced = False

    @classmethod
    def open(cls, path: Path) -> tuple[RecordFile, Scan]:
        """Open ``path`` (made when missing) and read what it holds."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path.with_name(path.name + TEMPORARY_SUFFIX))  # a replacement a crash cut short
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            data = _read_all(fd)
            scan = scan_records(data)
            if scan.corrupt:
                raise CorruptDisk(f"{path} is corrupt at byte {scan.valid_bytes}: {scan.corrupt}")
            if scan.torn_bytes:
                os.ftruncate(fd, scan.valid_bytes)
                os.fsync(fd)
            os.lseek(fd, scan.valid_bytes, os.SEEK_SET)
        except BaseException:
            os.close(fd)
            raise
        _sync_directory(path.parent)  # the file's own name is durable before anything in it counts
        return cls(path, fd, scan.valid_bytes), scan

    def append(self, data: bytes) -> None:
        """Write ``data`` (whole records) after what the file holds; durable at the next ``sync``."""
        start = self.size_bytes
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as error:
            self._cut_back(start)
            if error.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                raise DiskFull(f"{self.path}: the disk refused {len(data)} bytes ({error.strerror})") from error
            raise
        self.size_bytes = start + len(data)
        self._unsynced = True

    def sync(self) -> float:
        """Make every append durable; the seconds it took (0 when nothing was appended)."""
        if not self._unsynced:
            return 0.0
        started = time.perf_counter()
        os.fdatasync(self._fd)
        self._unsynced = False
        return time.perf_counter() - started

    def replace(self, data: bytes) -> None:
        """Make ``data`` the whole file, atomically: a crash leaves the old file or the new one."""
        temporary = self.path.with_name(self.path.name + TEMPORARY_SUFFIX)
        fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as error:
            os.close(fd)
            os.unlink(temporary)
            if error.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                raise DiskFull(f"{self.path}: no room to rewrite it ({error.strerror})") from error
            raise
        os.replace(temporary, self.path)
        _sync_directory(self.path.parent)
        os.close(self._fd)
        self._fd = fd  # the new file, positioned at its end
        self.size_bytes = len(data)
        self._unsynced = False

    def close(self) -> None:
        os.close(self._fd)

    def _cut_back(self, size_bytes: int) -> None:
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, size_bytes)
            os.lseek(self._fd, size_bytes, os.SEEK_SET)


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks = []
    offset = 0
    while offset < size:
        chunk = os.pread(fd, min(size - offset, 1 << 24), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
