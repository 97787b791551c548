"""The member as a state machine: ``Member.handle(now_ms, event) -> list[Effect]``.

``node.py`` puts the concerns together and dispatches events; each concern is a module that owns
its state (discovery, consensus, leases, data, migration_participant, migration_leader, membership,
admin), and ``lifecycle.py`` holds the member's lifecycle and its transitions.
"""

from shardgrid.core.member.node import Member

__all__ = ["Member"]
