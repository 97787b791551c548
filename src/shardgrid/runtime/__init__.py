"""The member as a real process: what the deterministic core leaves to the outside world.

Everything here may read files, the environment and, later, sockets and clocks; the core never
imports it (``tests/test_layering.py``). It starts with the settings layer, so that the process,
its tests and ``shardgrid config show`` agree on one source of truth for every setting.
"""
