"""A sans-IO Raft: events in (a message, a tick, a proposal), effects out (messages, committed
entries). It knows nothing of partitions; ``shardgrid.core.metadata`` is the state machine its log
drives, and the member feeds it the time and executes what it returns.
"""

from shardgrid.core.raft.log import Entry, RaftLog, Snapshot
from shardgrid.core.raft.membership import ConfChange, Membership
from shardgrid.core.raft.node import RaftNode, RaftSettings, Role

__all__ = ["ConfChange", "Entry", "Membership", "RaftLog", "RaftNode", "RaftSettings", "Role", "Snapshot"]
