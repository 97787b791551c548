"""Keys and values become bytes once, here, in the client; members only ever see bytes.

Keys use ``core.hashing.serialize_key`` (str in Hazelcast's form, so a key lands in the partition a
Hazelcast cluster with as many partitions would give it; int; bytes as they are). Values are
msgpack by default; ``BytesSerializer`` stores bytes untouched, and any object with ``dumps`` and
``loads`` plugs in.
"""

from __future__ import annotations

import struct
from typing import Any, Protocol

import msgspec

from shardgrid.core.hashing import INT64_MAX, INT64_MIN, Key, serialize_key


class Serializer(Protocol):
    def dumps(self, value: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class MsgpackSerializer:
    """Any msgpack value (None, bool, int, float, str, bytes, lists, dicts)."""

    def __init__(self) -> None:
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder()

    def dumps(self, value: Any) -> bytes:
        return self._encoder.encode(value)

    def loads(self, data: bytes) -> Any:
        return self._decoder.decode(data)


class BytesSerializer:
    """Values that are already bytes, stored as they are."""

    def dumps(self, value: Any) -> bytes:
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value)
        raise TypeError(f"this map stores bytes values, not {type(value).__name__}")

    def loads(self, data: bytes) -> Any:
        return data


class KeySerializer:
    """``core.hashing``'s key form. Reading keys back (``keys()``, ``entries()``) needs their type,
    since the form does not carry it: ``key_type`` is str (the default), int or bytes."""

    def __init__(self, key_type: type = str) -> None:
        if key_type not in (str, int, bytes):
            raise TypeError("key_type is str, int or bytes")
        self.key_type = key_type

    def dumps(self, key: Key) -> bytes:
        """The key's bytes; a key of another type than the map's is refused (a str map given 5,
        or an int map given "abcd", would store a key it could not read back, and "" and 0 would
        be the same 4 bytes)."""
        kind = self.key_type
        if kind is str:
            if not isinstance(key, str):
                raise TypeError(f"this map's keys are str (key_type=str), not {type(key).__name__}")
        elif kind is int:
            if isinstance(key, bool) or not isinstance(key, int):
                raise TypeError(f"this map's keys are int (key_type=int), not {type(key).__name__}")
            if not INT64_MIN <= key <= INT64_MAX:
                raise ValueError(f"an int key fits in a signed 64-bit integer, got {key}")
        elif not isinstance(key, bytes | bytearray | memoryview):
            raise TypeError(f"this map's keys are bytes (key_type=bytes), not {type(key).__name__}")
        return serialize_key(key)

    def loads(self, data: bytes) -> Any:
        if self.key_type is bytes:
            return data
        if self.key_type is int:
            if len(data) == 4:
                return struct.unpack(">i", data)[0]
            if len(data) == 8:
                return struct.unpack(">q", data)[0]
            raise ValueError(f"a stored key of {len(data)} bytes is not an int key")
        if len(data) < 4 or struct.unpack_from(">i", data)[0] != len(data) - 4:
            raise ValueError("a stored key is not a str key (read this map with key_type=int or bytes)")
        return data[4:].decode("utf-8")
