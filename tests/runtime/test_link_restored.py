"""A member connection broken during a rebalance: the frames lost with it go again when the link is
back, not a backstop timer later (member processes run in this test's own event loop, so the test can
cut one connection and look inside)."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from typing import Any

from shardgrid.client import AsyncClient
from shardgrid.runtime.process import MemberProcess
from shardgrid.runtime.settings import load_settings
from shardgrid.runtime.stream import FrameStream

from .local_cluster import free_ports

BACKSTOP_MS = 120_000  # far past the test's bound: only the reported link makes the resend in time
ENTRIES = 20_000


def _process(port: int, join: list[str]) -> MemberProcess:
    flags: dict[str, Any] = {
        "port": port,
        "join": ",".join(join),
        "initial_cluster_size": "3",
        "bootstrap_after_ms": "300",
        "join_retry_ms": "100",
        "transfer_resend_ms": str(BACKSTOP_MS),
        "migration_timeout_ms": str(2 * BACKSTOP_MS),
        "max_chunk_entries": "4",  # many chunks per partition: a window is open when the cut comes
    }
    logger = logging.getLogger(f"shardgrid.test.{port}")
    return MemberProcess(load_settings(None, {}, flags), logger)


async def _cut_a_rebalancing_connection() -> None:
    ports = free_ports(4)
    addresses = [f"127.0.0.1:{port}" for port in ports]
    processes = [_process(port, addresses[:3]) for port in ports[:3]]
    runs: list[asyncio.Task[int]] = []
    try:
        for process in processes:
            await process.start()
            runs.append(asyncio.create_task(process.run()))
        async with AsyncClient(addresses[:3], operation_call_timeout_ms=60_000) as client:
            await client.wait_until_safe(60)
            data = client.get_map("data")
            await data.put_all({f"k-{i}": i for i in range(ENTRIES)})
            joiner = _process(ports[3], addresses[:3])
            processes.append(joiner)
            await joiner.start()
            runs.append(asyncio.create_task(joiner.run()))

            def going_dead() -> tuple[MemberProcess, FrameStream] | None:
                """A source's connection to the joiner, mid-transfer, starts losing every frame
                without a word, as a connection does before anyone notices it broke."""
                for process in processes[:3]:
                    member = process.member
                    if member is None:
                        continue
                    for sending in member.migrations.sending():
                        if sending.heard and sending.chunks_in_flight and sending.destination.address == addresses[3]:
                            link = process._dialed.get(addresses[3])
                            if link is not None and link.stream is not None:
                                link.stream.send = lambda message: 0  # type: ignore[method-assign]
                                return process, link.stream
                return None

            dying = None
            for _ in range(3_000):
                dying = going_dead()
                if dying is not None:
                    break
                await asyncio.sleep(0.005)
            assert dying is not None, "no transfer to the joiner was seen in flight"
            source, stream = dying
            await asyncio.sleep(0.5)
            stream.abort()  # noticed: the connection breaks, and is dialed again
            await client.wait_until_safe(BACKSTOP_MS / 4000)  # a quarter of the backstop at most
            assert source.metrics.links_restored._value.get() >= 1
            assert source.member is not None
            assert source.member.migrations.chunks_resent >= 1
            found = await data.get_all([f"k-{i}" for i in range(ENTRIES)])
            assert found == {f"k-{i}": i for i in range(ENTRIES)}
    finally:
        for process in processes:
            process._finish("test over", 0)
        await asyncio.wait_for(asyncio.gather(*runs, return_exceptions=True), 10)


def test_a_connection_cut_mid_rebalance_is_resent_when_it_comes_back() -> None:
    asyncio.run(_cut_a_rebalancing_connection())


async def _dial_a_listener_that_closes_at_once() -> list[str]:
    """Dials, many times, a port whose listener accepts and closes at once; returns what stayed."""
    own, closer_port = free_ports(2)
    process = _process(own, [f"127.0.0.1:{own}"])
    await process.start()
    run = asyncio.create_task(process.run())

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", closer_port))
    listener.listen(64)

    def close_at_once() -> None:  # a thread: the close races the dialer's event loop
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connection.close()

    threading.Thread(target=close_at_once, daemon=True).start()
    address = f"127.0.0.1:{closer_port}"
    stuck: list[str] = []
    try:
        for _ in range(30):
            process._redial_after.pop(address, None)
            process._dial(address)
            await asyncio.sleep(0.05)
            link = process._dialed.get(address)
            if link is not None and link.stream is not None and link.stream.closed:
                stuck.append(address)
    finally:
        listener.close()
        process._finish("test over", 0)
        await asyncio.wait_for(run, 10)
    return stuck


def test_a_connection_closed_as_it_opens_is_never_kept_as_the_link():
    """Found by an outside tester: the close could reach the stream before the dial resumed, and
    the dead link then stayed, so the address was never dialed again."""
    assert asyncio.run(_dial_a_listener_that_closes_at_once()) == []
