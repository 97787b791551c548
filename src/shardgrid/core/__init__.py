"""The pure, deterministic core of shardgrid.

Nothing in this package performs I/O, reads a clock, starts a thread or uses the global random
generator: time arrives as an argument and randomness as a seeded ``random.Random``. That is what
lets the simulator replay any run bit for bit and lets the runtime reuse the very same logic.
"""
