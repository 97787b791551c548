"""The member as a state machine: ``Member.handle(now_ms, event) -> list[Effect]``.

One module per concern (membership, publication, migration master side, migration participant
side, recovery after a master change, data and replication), each a mixin over the shared state in
``state.py``; ``node.py`` puts them together and dispatches events.
"""

from shardgrid.core.member.node import Member

__all__ = ["Member"]
