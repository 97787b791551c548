"""shardgrid: a distributed in-memory data grid for Python.

The package is layered (see the README's architecture section): ``shardgrid.core`` is pure and
deterministic; everything that touches sockets, clocks or threads lives in the layers above it.
"""

__version__ = "0.1.0"

_CLIENT_NAMES = ("AsyncClient", "Client")


def __getattr__(name: str) -> object:
    # ``shardgrid.Client`` without importing the client (asyncio, sockets) with every core module.
    if name in _CLIENT_NAMES:
        from shardgrid import client

        return getattr(client, name)
    raise AttributeError(f"module 'shardgrid' has no attribute {name!r}")
