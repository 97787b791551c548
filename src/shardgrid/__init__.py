"""shardgrid: a distributed in-memory data grid for Python.

The package is layered (see the README's architecture section): ``shardgrid.core`` is pure and
deterministic; everything that touches sockets, clocks or threads lives in the layers above it.
"""

__version__ = "0.1.0"
