"""A fake member on 127.0.0.1 for client tests: it completes the acceptor's handshake, serves a
table naming itself as the owner of every partition, and answers the rest with ``behave``."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Callable
from typing import Any

from shardgrid.core import codec
from shardgrid.core import messages as m
from shardgrid.core.identity import MemberId
from shardgrid.core.session import NONCE_BYTES, Session, SessionSettings

PARTITIONS = 271


class FakeMember:
    def __init__(self, behave: Callable[[Any], list[Any]], tables_answered: int | None = None) -> None:
        """``tables_answered``: how many table requests it answers (all when None; then silence)."""
        self.behave = behave
        self.tables_left = tables_answered
        self.received: list[Any] = []
        self.endings: list[str] = []  # how each client connection ended: "reset" or "closed"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result(10)
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        self.identity = MemberId(str(uuid.uuid4()), self.address)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        settings = SessionSettings("shardgrid", codec.PROTOCOL_VERSION, b"")
        session = Session.accept(settings, self.identity, os.urandom(NONCE_BYTES), 0)
        decoder = codec.FrameDecoder()
        ending = "closed"
        try:
            while data := await reader.read(1 << 20):
                for message in decoder.feed(data):
                    if not session.established:
                        for reply in session.receive(message).send:
                            writer.write(codec.encode(reply))
                        continue
                    self.received.append(message)
                    if type(message) is m.TableRequest:
                        replies = [self.table()] if self.tables_left is None or self.tables_left > 0 else []
                        if self.tables_left:
                            self.tables_left -= 1
                    else:
                        replies = self.behave(message)
                    for reply in replies:
                        writer.write(codec.encode(reply))
                await writer.drain()
        except ConnectionResetError:
            ending = "reset"
        except (ConnectionError, codec.ProtocolError):
            pass
        finally:
            self.endings.append(ending)
            writer.close()

    def table(self) -> m.TableReply:
        return m.TableReply(
            partition_count=PARTITIONS,
            first_partition=0,
            addresses=(self.address,),
            versions=(1,) * PARTITIONS,
            replicas=((0,),) * PARTITIONS,
            more=False,
        )

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> FakeMember:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
