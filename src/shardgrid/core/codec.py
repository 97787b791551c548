"""One codec for every message: msgpack, with a protocol version and a size limit per frame.

A frame is a 4-byte big-endian length followed by a msgpack array ``[version, message]``. Message
dataclasses travel as msgpack extension values whose code names the class, so decoding rebuilds
exactly the classes that were encoded and refuses anything else. A frame over
``MAX_FRAME_BYTES`` is refused on both sides: a peer cannot make a member buffer without bound.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import msgpack

from shardgrid.core import messages
from shardgrid.core.errors import ProtocolError
from shardgrid.core.identity import Replica
from shardgrid.core.limits import MAX_FRAME_BYTES
from shardgrid.core.migration import Migration

PROTOCOL_VERSION = 1
LENGTH_PREFIX = struct.Struct(">I")

_CLASSES: tuple[type, ...] = (
    Replica,
    Migration,
    *(
        cls
        for _, cls in sorted(vars(messages).items())
        if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == messages.__name__
    ),
)
_CODE_OF: dict[type, int] = {cls: code for code, cls in enumerate(_CLASSES, start=1)}
_CLASS_OF: dict[int, type] = {code: cls for cls, code in _CODE_OF.items()}


def _default(value: Any) -> msgpack.ExtType:
    code = _CODE_OF.get(type(value))
    if code is None:
        raise TypeError(f"cannot encode {type(value).__name__}")
    fields = [getattr(value, f.name) for f in dataclasses.fields(value) if f.init]
    return msgpack.ExtType(code, msgpack.packb(fields, default=_default, use_bin_type=True))


def _ext_hook(code: int, data: bytes) -> Any:
    cls = _CLASS_OF.get(code)
    if cls is None:
        raise ProtocolError(f"unknown message code {code}")
    fields = msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, use_list=False, strict_map_key=True)
    try:
        return cls(*fields)
    except (TypeError, ValueError, AssertionError) as error:
        raise ProtocolError(f"malformed {cls.__name__}: {error}") from error


def encode(message: Any) -> bytes:
    """The frame for ``message``: length prefix, then ``[PROTOCOL_VERSION, message]``."""
    body = msgpack.packb([PROTOCOL_VERSION, message], default=_default, use_bin_type=True)
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(f"{type(message).__name__} needs {len(body)} bytes, over the {MAX_FRAME_BYTES} limit")
    return LENGTH_PREFIX.pack(len(body)) + body


def decode_body(body: bytes) -> Any:
    """The message of one frame body (without its length prefix)."""
    try:
        version, message = msgpack.unpackb(body, ext_hook=_ext_hook, raw=False, use_list=False)
    except ProtocolError:
        raise
    except Exception as error:  # msgpack raises several unrelated types for bad input
        raise ProtocolError(f"undecodable frame: {error}") from error
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {version} is not {PROTOCOL_VERSION}")
    if type(message) not in _CODE_OF:
        raise ProtocolError(f"a frame must hold one message, got {type(message).__name__}")
    return message


class FrameDecoder:
    """Splits a byte stream into messages; holds at most one partial frame."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buffer = bytearray()
        self._max_frame_bytes = max_frame_bytes

    def feed(self, data: bytes) -> list[Any]:
        self._buffer += data
        out = []
        while len(self._buffer) >= LENGTH_PREFIX.size:
            (length,) = LENGTH_PREFIX.unpack_from(self._buffer)
            if length > self._max_frame_bytes:
                raise ProtocolError(f"frame of {length} bytes is over the {self._max_frame_bytes} limit")
            end = LENGTH_PREFIX.size + length
            if len(self._buffer) < end:
                break
            body = bytes(self._buffer[LENGTH_PREFIX.size : end])
            del self._buffer[:end]
            out.append(decode_body(body))
        return out
