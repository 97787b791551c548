"""What comes out of a member: the effects ``Member.handle`` returns, which the runtime and the
simulator carry out (and nothing else: the member never sends, sleeps or reads a clock).

What goes in is in ``inputs.py``; the events an ``Emit`` carries, in ``events.py``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from shardgrid.core.identity import MemberId


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``message`` to the member ``target`` (at its address, meant for its uuid)."""

    target: MemberId
    message: Any


@dataclass(frozen=True, slots=True)
class SendToAddress:
    """Send to an address whose member is not known yet (join through a seed address)."""

    address: str
    message: Any


@dataclass(frozen=True, slots=True)
class ReplyToClient:
    client_address: str
    message: Any


@dataclass(frozen=True, slots=True)
class SetTimer:
    name: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class Emit:
    """Something a user or operator wants to know happened (see ``events.py``)."""

    event: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Stop:
    """The member stopped (it left, the cluster shut down, a signal stopped it): the process ends,
    with ``exit_code``. The member decides both; the runtime only carries them out."""

    reason: str
    exit_code: int


class DiskFile(enum.Enum):
    """The files of a persistent member's data directory, each one concern's."""

    RAFT = "raft"  # the Raft hard state, log and snapshots (``raft_disk``)
    REPLICAS = "replicas"  # every replica the member holds, as images and write runs (``replica_disk``)


class WriteMode(enum.Enum):
    """How a ``Persist`` writes its file. A file is compacted by bounded steps: it is written anew
    beside itself (its next file: images of what it holds, a bounded share a step, and the steps'
    own records for what the next file holds already) while the file itself goes on being written
    whole, and the next file takes its place once it holds everything. The next file is never read:
    a restart removes it, and the file itself is whole."""

    APPEND = "append"  # ``data`` after what the file holds
    REPLACE = "replace"  # ``data`` is the whole file, atomically: the old file or the new, never a mix
    BEGIN_NEXT = "begin-next"  # ``data`` begins the next file (one left from before is discarded)
    APPEND_NEXT = "append-next"  # ``data`` after what the next file holds
    ADOPT_NEXT = "adopt-next"  # the next file, synced, becomes the file, atomically (``data`` empty)
    DISCARD_NEXT = "discard-next"  # the next file is deleted (``data`` empty)

    @property
    def to_next(self) -> bool:
        return self in (WriteMode.BEGIN_NEXT, WriteMode.APPEND_NEXT)


@dataclass(frozen=True, slots=True, kw_only=True)
class Persist:
    """Write ``data`` (whole disk records) to ``file`` as ``mode`` says.

    Every send and reply of the step that emitted a ``Persist`` with ``hold_sends``, and of any
    step after it, goes out only once that write is synced: what they say (a vote, an
    acknowledgement, a reply to a write) may depend on it, as etcd's Ready requires. Writes of one
    step, and of the steps a loop turn runs, may share one sync (group commit)."""

    file: DiskFile
    data: bytes
    mode: WriteMode = WriteMode.APPEND
    hold_sends: bool = True


@dataclass(frozen=True, slots=True)
class KeepIdentity:
    """Write the data directory's member file anew, naming ``member`` (synced before any send of
    the step goes out): a persistent member that came back at another address is now known to
    the cluster there, and a restart on the directory comes back as that member."""

    member: MemberId


Effect = Send | SendToAddress | ReplyToClient | SetTimer | Emit | Stop | Persist | KeepIdentity
