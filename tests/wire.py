"""Building the data path's messages from separate keys and values, and reading their answers, for
tests: the wire carries packed columns (``messages.Column``), which these pack and unpack."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shardgrid.core import messages as m


def column(items: Sequence[bytes]) -> m.Column:
    return m.Column.of(list(items))


def map_request(
    *,
    keys: Sequence[bytes] = (),
    values: Sequence[bytes] = (),
    expected: Sequence[bytes] = (),
    **fields: Any,
) -> m.MapRequest:
    """A MapRequest of separate keys, values and expected values (packed here)."""
    return m.MapRequest(keys=column(keys), values=column(values), expected=column(expected), **fields)


def write_run(*, keys: Sequence[bytes] = (), values: Sequence[bytes] = (), **fields: Any) -> m.WriteRun:
    """A WriteRun of separate keys and values (packed here)."""
    return m.WriteRun(keys=column(keys), values=column(values), **fields)


def codes(reply: m.MapReply) -> tuple[m.ReplyCode, ...]:
    """A reply's codes, a ReplyCode each."""
    return tuple(m.ReplyCode(code) for code in reply.codes)


def values(reply: m.MapReply) -> tuple[bytes | None, ...]:
    """A reply's values, one per key (empty when it carries none)."""
    return tuple(reply.value_list())


def run_keys(run: m.WriteRun) -> tuple[bytes, ...]:
    return tuple(run.keys.items())


def run_values(run: m.WriteRun) -> tuple[bytes, ...]:
    return tuple(run.values.items())


def run_columns(run: m.WriteRun) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """A run's keys and values, separate."""
    return run_keys(run), run_values(run)


def map_reply(
    *, codes: Sequence[m.ReplyCode] = (), values: Sequence[bytes | None] | None = None, **fields: Any
) -> m.MapReply:
    """A MapReply of separate codes and values (None: no value; ``values`` None: an answer without
    values)."""
    if values is None:
        return m.MapReply(codes=bytes(codes), **fields)
    packed = m.Column.of([b"" if value is None else value for value in values])
    present = bytes(value is not None for value in values)
    return m.MapReply(codes=bytes(codes), values=packed, present=present, **fields)


def sync_chunk(*, sync_id: str, **fields: Any) -> m.TransferChunk:
    """A replica sync's chunk (``sync_id``: its transfer's id)."""
    return m.TransferChunk(kind=m.SYNC, transfer_id=sync_id, **fields)


def migration_chunk(*, record: Any, **fields: Any) -> m.TransferChunk:
    """A chunk of the migration ``record``."""
    return m.TransferChunk(
        kind=m.MIGRATION, transfer_id=record.migration_id, partition_id=record.partition_id, migration=record, **fields
    )


def sync_ack(sync_id: str, sequence: int, accepted: bool, complete: bool = False) -> m.TransferAck:
    return m.TransferAck(kind=m.SYNC, transfer_id=sync_id, sequence=sequence, accepted=accepted, complete=complete)


def of_syncs(messages: Sequence[Any]) -> list[Any]:
    """The transfer messages (chunks or acknowledgements) of replica syncs among ``messages``."""
    return [message for message in messages if message.kind is m.SYNC]


def of_migrations(messages: Sequence[Any]) -> list[Any]:
    """The transfer messages (chunks or acknowledgements) of migrations among ``messages``."""
    return [message for message in messages if message.kind is m.MIGRATION]
