"""The wire codec: every message round-trips, frames are bounded, bad input is refused."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.core import codec, messages
from shardgrid.core.errors import ProtocolError
from shardgrid.core.identity import Replica
from shardgrid.core.limits import MAX_REPLICA_COUNT
from shardgrid.core.migration import Migration

MESSAGE_CLASSES = [
    cls
    for cls in vars(messages).values()
    if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == messages.__name__
]

replicas = st.builds(Replica, st.uuids().map(str), st.text(min_size=1, max_size=30))
indexes = st.integers(min_value=-1, max_value=MAX_REPLICA_COUNT - 1)
migrations = st.builds(
    Migration,
    replicas,
    st.integers(0, MAX_REPLICA_COUNT - 1),
    indexes,
    replicas,
    indexes,
    st.integers(0, MAX_REPLICA_COUNT - 1),
).filter(lambda m: m.source != m.destination)


def _strategy_for(annotation: str) -> st.SearchStrategy:
    simple = {
        "int": st.integers(min_value=-(2**63), max_value=2**63 - 1),
        "str": st.text(max_size=40),
        "bytes": st.binary(max_size=64),
        "bool": st.booleans(),
        "Replica": replicas,
        "Replica | None": st.none() | replicas,
        "str | None": st.none() | st.text(max_size=20),
        "bytes | None": st.none() | st.binary(max_size=20),
        "int | None": st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1),
        "Migration": migrations,
    }
    if annotation in simple:
        return simple[annotation]
    if annotation in {c.__name__ for c in MESSAGE_CLASSES}:
        return st.deferred(lambda: instances(next(c for c in MESSAGE_CLASSES if c.__name__ == annotation)))
    if annotation == "tuple[tuple[int, int], ...]":
        return st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=3).map(tuple)
    if annotation == "tuple[tuple[int, Operation], ...]":
        return st.lists(st.tuples(st.integers(0, 270), instances(messages.Operation)), max_size=3).map(tuple)
    if annotation.startswith("tuple[") and annotation.endswith(", ...]"):
        return st.lists(_strategy_for(annotation[6:-6]), max_size=3).map(tuple)
    raise AssertionError(f"no strategy for {annotation}")


def instances(cls: type) -> st.SearchStrategy:
    fields = [f for f in dataclasses.fields(cls) if f.init]
    return st.builds(cls, *(_strategy_for(str(f.type)) for f in fields))


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_message_round_trips(cls: type, data: st.DataObject) -> None:
    message = data.draw(instances(cls))
    frame = codec.encode(message)
    assert codec.FrameDecoder().feed(frame) == [message]


def test_frames_split_anywhere_decode_the_same() -> None:
    frames = [codec.encode(messages.Heartbeat(i, i * 7)) for i in range(5)]
    stream = b"".join(frames)
    for cut in range(1, len(stream)):
        decoder = codec.FrameDecoder()
        got = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        assert got == [messages.Heartbeat(i, i * 7) for i in range(5)]


def test_oversized_frames_are_refused_before_buffering() -> None:
    decoder = codec.FrameDecoder(max_frame_bytes=100)
    with pytest.raises(ProtocolError, match="over the 100 limit"):
        decoder.feed((1000).to_bytes(4, "big") + b"x")


def test_garbage_unknown_codes_and_other_versions_are_refused() -> None:
    with pytest.raises(ProtocolError):
        codec.decode_body(b"\xc1\xc1\xc1")
    import msgpack

    with pytest.raises(ProtocolError, match="unknown message code"):
        codec.decode_body(msgpack.packb([1, msgpack.ExtType(99, b"\x90")]))
    with pytest.raises(ProtocolError, match="protocol version"):
        codec.decode_body(msgpack.packb([2, None]))
    with pytest.raises(ProtocolError, match="one message"):
        codec.decode_body(msgpack.packb([codec.PROTOCOL_VERSION, 5]))


def test_a_malformed_message_is_a_protocol_error_not_a_crash() -> None:
    import msgpack

    code = codec._CODE_OF[Migration]
    bad = msgpack.ExtType(code, msgpack.packb([None, 3, -1, None, -1, -1]))  # no participant at all
    with pytest.raises(ProtocolError, match="malformed Migration"):
        codec.decode_body(msgpack.packb([codec.PROTOCOL_VERSION, bad]))


def test_unencodable_values_are_refused_by_the_sender() -> None:
    with pytest.raises(TypeError, match="cannot encode"):
        codec.encode(messages.Heartbeat(1, object()))  # type: ignore[arg-type]
