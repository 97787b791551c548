"""uvloop's event loop when it is installed (the ``fast`` extra), asyncio's own otherwise: the same
code on a loop that moves bytes in C. Members run on it, and so do the Spark tasks' clients."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``main`` to its end on a new loop of its own, as ``asyncio.run``."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
