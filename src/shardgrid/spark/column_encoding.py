"""Serialized keys and msgpack values of a whole Arrow batch, built in Arrow and numpy.

A write task's per-row Python work set its rate: ``to_pylist`` made a dict per row and msgspec
encoded each (about 590 ns a row for ``id long, payload string``), and each key was packed by
``struct`` (100 ns). Built a column at a time the same bytes cost about 160 ns a row (200 with
the list of bytes the client takes) and the keys 13 ns, measured on 10,000-row batches: every value
column becomes a column of its msgpack encodings (a header chosen per row by its length or value,
then the value's bytes), and Arrow joins them row by row behind the map header and field names.

The bytes are exactly msgspec's (the smallest msgpack form of each value, as msgspec writes them),
so a row written here, by the streaming writer or by ``Client`` reads and compares alike; the tests
check it on random columns. A column of another type (timestamps, decimals, structs, lists...) is
left to the row-by-row encoder: the functions return None for the batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardgrid.core.hashing import INT32_MAX, INT32_MIN
from shardgrid.spark.options import KeyType

BYTES = pa.large_binary()  # 64-bit offsets: a batch of large values may pass 2 GiB
_EMPTY = pa.scalar(b"", BYTES)
_NIL = pa.scalar(b"\xc0", BYTES)  # msgpack's nil, for a null in a value column


def _masked_rows(matrix: np.ndarray, mask: np.ndarray) -> pa.Array:
    """One binary value per row of ``matrix`` (uint8, n x width): the row's bytes where ``mask``
    is set, in order. Rows of varying width, built without a Python step per row."""
    data = matrix[mask]
    offsets = np.zeros(len(matrix) + 1, dtype=np.int64)
    np.cumsum(mask.sum(axis=1), out=offsets[1:])
    return pa.Array.from_buffers(BYTES, len(matrix), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _fixed_rows(matrix: np.ndarray) -> pa.Array:
    """One binary value per row of ``matrix`` (uint8, n x width): every row whole."""
    count, width = matrix.shape
    offsets = np.arange(0, (count + 1) * width, width, dtype=np.int64)
    data = np.ascontiguousarray(matrix)
    return pa.Array.from_buffers(BYTES, count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _head_and_tail(head: np.ndarray, number: np.ndarray, tail_bytes: np.ndarray) -> pa.Array:
    """Per row: the byte ``head``, then the last ``tail_bytes`` (0 to 8) bytes of ``number``
    (int64 or uint64) big-endian; msgpack's form of every integer, float and length header."""
    count = len(head)
    matrix = np.empty((count, 9), dtype=np.uint8)
    matrix[:, 0] = head
    matrix[:, 1:] = number.astype(number.dtype.newbyteorder(">")).view(np.uint8).reshape(count, 8)
    shortest, longest = (int(tail_bytes.min()), int(tail_bytes.max())) if count else (0, 0)
    if shortest == longest:  # one width for every row (the common case): no mask to apply
        return _fixed_rows(matrix[:, [0, *range(9 - longest, 9)]])
    mask = np.arange(9)[None, :] >= (9 - tail_bytes)[:, None]
    mask[:, 0] = True
    return _masked_rows(matrix, mask)


def _length_headers(lengths: np.ndarray, small: int | None, codes: tuple[int, int, int]) -> pa.Array:
    """msgpack's header of a str or bin of each length: ``small`` | length below 32 (fixstr; a bin
    has none), else the 8-, 16- or 32-bit length after its code."""
    lengths = lengths.astype(np.int64)
    sizes = [lengths < 256, lengths < 65536]
    head = np.select(sizes, [codes[0], codes[1]], codes[2]).astype(np.uint8)
    tail = np.select(sizes, [1, 2], 4)
    if small is not None:
        fix = lengths < 32
        head = np.where(fix, small | lengths, head).astype(np.uint8)
        tail = np.where(fix, 0, tail)
    return _head_and_tail(head, lengths, tail)


_BIN_CODES = (0xC4, 0xC5, 0xC6)


def _bin_headers(data: pa.Array) -> pa.Array:
    """msgpack's header of each value of ``data`` as a bin (which has no fixed form)."""
    return _length_headers(binary_lengths(data), None, _BIN_CODES)


def _integers(values: np.ndarray) -> pa.Array:
    """msgpack's smallest form of each int64, as msgspec writes it: a fixint, else a positive
    value as the narrowest unsigned type and a negative one as the narrowest signed type."""
    positive = values >= 0
    # Each row's form, the first that holds it: (its condition, head byte, bytes after the head).
    forms = [
        (positive & (values <= 0x7F), values & 0xFF, 0),
        (positive & (values <= 0xFF), 0xCC, 1),
        (positive & (values <= 0xFFFF), 0xCD, 2),
        (positive & (values <= 0xFFFFFFFF), 0xCE, 4),
        (positive, 0xCF, 8),
        (values >= -32, values & 0xFF, 0),
        (values >= -(2**7), 0xD0, 1),
        (values >= -(2**15), 0xD1, 2),
        (values >= INT32_MIN, 0xD2, 4),
    ]
    conditions = [condition for condition, _, _ in forms]
    head = np.select(conditions, [head for _, head, _ in forms], 0xD3).astype(np.uint8)
    tail = np.select(conditions, [tail for _, _, tail in forms], 8)
    return _head_and_tail(head, values, tail)


def _encoded_column(column: pa.Array) -> list[pa.Array] | None:
    """Each value of ``column`` in msgpack (nil for a null), as pieces to join row by row (a
    header and the data, joined once with the rest of the row); None for a type left to msgspec."""
    kind = column.type
    count = len(column)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        data = column.cast(pa.large_string()).fill_null("").cast(BYTES)
        pieces = [_length_headers(binary_lengths(data), 0xA0, (0xD9, 0xDA, 0xDB)), data]
    elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        data = column.cast(BYTES).fill_null(b"")
        pieces = [_bin_headers(data), data]
    elif pa.types.is_signed_integer(kind):
        pieces = [_integers(column.cast(pa.int64()).fill_null(0).to_numpy())]
    elif pa.types.is_float64(kind) or pa.types.is_float32(kind):
        numbers = column.cast(pa.float64()).fill_null(0.0).to_numpy()
        pieces = [_head_and_tail(np.full(count, 0xCB, np.uint8), numbers, np.full(count, 8))]
    elif pa.types.is_boolean(kind):
        flags = column.fill_null(False).to_numpy(zero_copy_only=False)
        heads = np.where(flags, 0xC3, 0xC2).astype(np.uint8)
        pieces = [_head_and_tail(heads, np.zeros(count, np.int64), np.zeros(count, np.int64))]
    else:
        return None
    if column.null_count:
        joined = pieces[0] if len(pieces) == 1 else pc.binary_join_element_wise(*pieces, _EMPTY)
        pieces = [pc.if_else(column.is_null(), _NIL, joined)]
    return pieces


def binary_lengths(data: pa.Array) -> np.ndarray:
    return pc.binary_length(data).to_numpy()


def map_header(size: int) -> bytes:
    """msgpack's header of a map of ``size`` entries, as msgspec writes it."""
    return bytes([0x80 | size]) if size < 16 else b"\xde" + size.to_bytes(2, "big")


def map_values(batch: pa.RecordBatch, fields: tuple[str, ...]) -> pa.Array | None:
    """Each row's ``fields`` as a msgpack map (name to value, in order), as msgspec encodes the
    row's dict; None when a column's type is left to the row-by-row encoder."""
    count = batch.num_rows
    names = [msgspec.msgpack.encode(name) for name in fields]
    pieces: list[pa.Array | bytes] = [map_header(len(fields))]
    for name, encoded_name in zip(fields, names, strict=True):
        encoded = _encoded_column(batch.column(batch.schema.get_field_index(name)))
        if encoded is None:
            return None
        if isinstance(pieces[-1], bytes):
            pieces[-1] += encoded_name
        else:
            pieces.append(encoded_name)
        pieces.extend(encoded)
    if len(pieces) == 1:
        return pa.array([pieces[0]] * count, BYTES)
    arguments = [pa.scalar(piece, BYTES) if isinstance(piece, bytes) else piece for piece in pieces]
    return pc.binary_join_element_wise(*arguments, _EMPTY)


def spans(items: pa.Array) -> tuple[np.ndarray, pa.Buffer | None]:
    """A large_binary array's offsets (one past its last row too) and its data buffer: rows
    ``[i, j)`` end to end are ``data[offsets[i]:offsets[j]]``."""
    offsets = np.frombuffer(items.buffers()[1], dtype=np.int64)[items.offset : items.offset + len(items) + 1]
    return offsets, items.buffers()[2]


def as_binary(column: pa.Array | Sequence[bytes]) -> pa.Array:
    """``column`` (an Arrow binary or string array, or a list of bytes) as a large_binary array."""
    if isinstance(column, pa.Array):
        return column if column.type == BYTES else column.cast(BYTES)
    return pa.array(column, BYTES)


def serialized_keys(column: pa.Array, key_type: KeyType) -> pa.Array | None:
    """``core.hashing.serialize_key``'s form of each key of ``column`` (no nulls); None for a
    column left to the key-by-key serializer."""
    kind = column.type
    count = len(column)
    if key_type is KeyType.LONG and pa.types.is_signed_integer(kind):
        numbers = column.cast(pa.int64()).to_numpy()
        narrow = (numbers >= INT32_MIN) & (numbers <= INT32_MAX)
        # A key that fits 32 bits is 4 bytes, a wider one 8 (the width follows from the value).
        matrix = numbers.astype(">i8").view(np.uint8).reshape(count, 8)
        if narrow.all():
            return _fixed_rows(matrix[:, 4:])
        mask = np.ones((count, 8), dtype=bool)
        mask[:, :4] = ~narrow[:, None]
        return _masked_rows(matrix, mask)
    if key_type is KeyType.STRING and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        data = column.cast(pa.large_string()).cast(BYTES)
        lengths = binary_lengths(data).astype(">i4").view(np.uint8).reshape(count, 4)
        prefix = _fixed_rows(lengths)
        return pc.binary_join_element_wise(prefix, data, _EMPTY)
    if key_type is KeyType.BINARY and (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        return column.cast(BYTES)
    return None
