"""What a client call can end with, each a class a program can catch.

``ShardgridClientError`` is the base of them all. A write that ends in an error whose
``outcome_unknown`` is true may or may not have been applied (seed 001's call semantics).
"""

from __future__ import annotations


class ShardgridClientError(Exception):
    outcome_unknown = False


class ClusterUnavailableError(ShardgridClientError):
    """No member of the cluster could be reached (or none answered) within the call's time."""


class AuthenticationError(ShardgridClientError):
    """A member refused the handshake: another cluster name, a wrong secret, another protocol."""


class OperationTimeoutError(ShardgridClientError):
    """The call ran out of ``operation_call_timeout_ms``; ``outcome_unknown`` says whether a write
    may have been applied by an attempt that was never confirmed."""

    def __init__(self, message: str, outcome_unknown: bool) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


class IndeterminateOperationStateError(ShardgridClientError):
    """With ``fail_on_indeterminate_operation_state`` on: a write was applied by its owner but not
    confirmed by every sync backup, or its owner left before answering. It may or may not last."""

    outcome_unknown = True


class OperationRejectedError(ShardgridClientError):
    """The cluster refused the call whole (a limit, a malformed request, a cluster state that takes
    no writes); retrying the same call will not help. ``outcome_unknown`` is set when an earlier
    attempt of the same write may have been applied."""

    def __init__(self, message: str, outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


class MemoryFullError(OperationRejectedError):
    """A member that owns some of the call's keys holds its ``max_memory_bytes`` of records: it
    refused the writes to them, unapplied (the message names the member and its limit), while it
    still serves reads and removes. Writes are taken again once data is removed or expires,
    members join and take partitions, or the limit is raised. The call's keys in partitions of
    other members may have been written (a put_all is not atomic across partitions)."""


class DiskFullError(OperationRejectedError):
    """A persistent member that owns some of the call's keys is short of free disk space (it keeps
    its ``disk_reserve_bytes`` and room to rewrite what it holds): it refused the writes to them,
    unapplied (the message names the member, its free space and what it keeps), while it still
    serves reads and removes. Writes are taken again once its disk has room. The call's keys in
    partitions of other members may have been written."""


class PartitionUnavailableError(ShardgridClientError):
    """Every replica of a partition the call needs is on members that stopped answering (a network
    split, or members that may have crashed): the partition is neither served nor restarted empty
    until one of them answers again (then it is served whole), an operator removes them or revives
    it, or ``partition_lost_timeout_ms`` passes (then it is reported lost). The message names the
    partition and its members, and how many of the call's keys are unfinished: nothing was applied
    to those by the attempt refused, while the call's keys in partitions that are available were
    written (a put_all is not atomic across partitions). ``outcome_unknown`` is set when an earlier
    attempt of an unfinished write may have been applied (found by an outside tester: the message
    said nothing of the keys a put_all had written)."""

    def __init__(self, message: str, outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


class ClientClosedError(ShardgridClientError):
    """The client was closed while the call was in progress, or before it started."""


class AdminError(ShardgridClientError):
    """An administrative request failed; the message says why (the member's reason)."""


class MemberProtocolError(ShardgridClientError):
    """A member answered what the protocol does not allow (a page whose lengths do not add up):
    the member's fault, or not a shardgrid member of this version at that address."""
