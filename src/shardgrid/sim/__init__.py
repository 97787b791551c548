"""The deterministic simulator: many members, a hostile network and a workload on one virtual clock.

It drives exactly the ``core.member.Member`` code the runtime drives. Every random choice comes
from one ``random.Random`` seeded by the run's seed, so a run (and a failing seed) replays bit for
bit; ``trace_hash`` of two runs of a seed is equal.
"""
