"""Rows to keys and values and back, a column at a time, as the data source's tasks move them.

A row becomes one entry: its key column serialized as the client serializes keys (so a map written
by Spark is read by ``Client`` and the other way round), and its value either the other columns as
a msgpack map (field name to value) or one column stored as it is (``value.column``: bytes, or a
string as UTF-8). Reading turns entries into Arrow record batches of exactly the declared schema.
Nothing here imports Spark: the tasks and the tests call it with pyarrow alone.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from shardgrid.client.serialization import KeySerializer
from shardgrid.core.hashing import INT32_MAX, INT32_MIN
from shardgrid.core.limits import MAX_TTL_SECONDS
from shardgrid.spark.column_decoding import MapColumns, key_column
from shardgrid.spark.column_encoding import BYTES, as_binary, map_values, serialized_keys
from shardgrid.spark.options import KeyType, SparkOptionError

PLAIN_VALUE_COLUMN = "value"  # a sampled map whose values are not msgpack maps is read as one column
_INT32 = struct.Struct(">i")  # a long key of 32 bits, and a string key's length (``serialize_key``)
# Column types whose decoded values Arrow takes as they are: a stored value of another type fails
# the typed decode, and the batch is decoded again the general way (which names the column). Not
# floating point: msgspec turns a stored integer into a float without a word, rounding 2**53 + 1,
# where Arrow refuses an integer a float cannot hold exactly (found by an outside tester).
_PLAIN_TYPES: list[tuple[Callable[[pa.DataType], bool], type]] = [
    (pa.types.is_boolean, bool),
    (pa.types.is_integer, int),
    (lambda kind: pa.types.is_string(kind) or pa.types.is_large_string(kind), str),
    (lambda kind: pa.types.is_binary(kind) or pa.types.is_large_binary(kind), bytes),
]


class RowError(ValueError):
    """A row the map cannot take or an entry the schema cannot hold; the message names which."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Where a row's key and value come from (or go to): the same for every batch of one job."""

    key_column: str
    key_type: KeyType
    value_column: str | None  # None: the other columns, as a msgpack map
    value_is_text: bool  # value.column is a string column (stored as UTF-8)
    field_names: tuple[str, ...]  # every column of the schema, in order
    ttl_column: str | None = None  # each row's TTL in seconds (a write's; not stored in the value)

    @property
    def map_fields(self) -> tuple[str, ...]:
        return tuple(name for name in self.field_names if name not in (self.key_column, self.ttl_column))


def key_type_of(arrow_type: pa.DataType, column: str) -> KeyType:
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return KeyType.STRING
    if pa.types.is_integer(arrow_type):
        return KeyType.LONG
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return KeyType.BINARY
    raise SparkOptionError(f"shardgrid: key column '{column}' is {arrow_type}; a key is a string, an integer or binary")


def layout_of(schema: pa.Schema, key_column: str, value_column: str | None, ttl_column: str | None = None) -> Layout:
    """Checks the columns the options name against the schema; raises SparkOptionError."""
    names = tuple(schema.names)
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        # A map holds one value per field name: one of the columns would be dropped without a word.
        raise SparkOptionError(
            f"shardgrid: column names repeat ({', '.join(repeated)}): an entry holds one value per name; "
            "rename or drop the repeated columns"
        )
    if key_column not in names:
        raise SparkOptionError(
            f"shardgrid: option 'key.column': no column '{key_column}' in the schema (columns: {', '.join(names)})"
        )
    key_type = key_type_of(schema.field(key_column).type, key_column)
    for field in schema:
        if _holds_map(field.type):
            # Arrow hands a map over as (key, value) pairs and msgpack has no such type: what was
            # stored could not be read back as the map it was. Refused, not stored wrongly.
            raise SparkOptionError(
                f"shardgrid: column '{field.name}' is {field.type}: map columns are not supported; "
                "store it as a struct, or as JSON text (to_json)"
            )
    value_is_text = False
    if value_column is not None:
        if value_column not in names:
            raise SparkOptionError(
                f"shardgrid: option 'value.column': no column '{value_column}' in the schema "
                f"(columns: {', '.join(names)})"
            )
        if value_column == key_column:
            raise SparkOptionError("shardgrid: options 'value.column' and 'key.column' name the same column")
        value_type = schema.field(value_column).type
        value_is_text = pa.types.is_string(value_type) or pa.types.is_large_string(value_type)
        if not value_is_text and not (pa.types.is_binary(value_type) or pa.types.is_large_binary(value_type)):
            raise SparkOptionError(
                f"shardgrid: option 'value.column': column '{value_column}' is {value_type}; a value stored as "
                "it is must be binary or string (leave the option out to store the columns as a msgpack map)"
            )
    if ttl_column is not None:
        if ttl_column not in names:
            raise SparkOptionError(
                f"shardgrid: option 'ttl.column': no column '{ttl_column}' in the schema (columns: {', '.join(names)})"
            )
        if ttl_column in (key_column, value_column):
            raise SparkOptionError("shardgrid: option 'ttl.column' names the key or the value column")
        ttl_type = schema.field(ttl_column).type
        if not (pa.types.is_integer(ttl_type) or pa.types.is_floating(ttl_type)):
            raise SparkOptionError(
                f"shardgrid: option 'ttl.column': column '{ttl_column}' is {ttl_type}; a TTL is a number of seconds"
            )
    return Layout(
        key_column=key_column,
        key_type=key_type,
        value_column=value_column,
        value_is_text=value_is_text,
        field_names=names,
        ttl_column=ttl_column,
    )


def ttls_ms_of(seconds: pa.Array | Sequence[Any], column: str) -> np.ndarray:
    """A TTL column (seconds, integer or floating) as each row's TTL in ms, unsigned 64-bit
    little-endian; raises RowError on a null, a negative, a NaN or one past MAX_TTL_SECONDS."""
    array = seconds if isinstance(seconds, pa.Array) else pa.array(list(seconds))
    if array.null_count:
        raise RowError(f"shardgrid: a row has a null TTL (column '{column}'); give every row its seconds (0: none)")
    if len(array) == 0:
        return np.zeros(0, dtype="<u8")
    numbers = array.to_numpy(zero_copy_only=False).astype(np.float64)
    if np.isnan(numbers).any() or numbers.min() < 0 or numbers.max() > MAX_TTL_SECONDS:
        raise RowError(
            f"shardgrid: column '{column}': a TTL is 0 (until removed) to {MAX_TTL_SECONDS} seconds; "
            f"found {numbers.min()} to {numbers.max()}"
        )
    if pa.types.is_integer(array.type):  # exact, whatever the magnitude
        return array.to_numpy(zero_copy_only=False).astype("<u8") * np.uint64(1000)
    # To the nearest ms, and a positive TTL under half a ms to 1 ms, not to 0, which would mean
    # "until removed" (found by an outside tester: 0.0004 s was stored to live for ever).
    ms = np.rint(numbers * 1000)
    ms[(numbers > 0) & (ms == 0)] = 1
    return ms.astype("<u8")


def _holds_map(arrow_type: pa.DataType) -> bool:
    if pa.types.is_map(arrow_type):
        return True
    if pa.types.is_struct(arrow_type):
        return any(_holds_map(arrow_type.field(i).type) for i in range(arrow_type.num_fields))
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return _holds_map(arrow_type.value_type)
    return False


def key_serializer(key_type: KeyType) -> KeySerializer:
    return KeySerializer({KeyType.STRING: str, KeyType.LONG: int, KeyType.BINARY: bytes}[key_type])


class RowEncoder:
    """Arrow record batches (or Spark rows) to the serialized keys and values of a put_all."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._keys = key_serializer(layout.key_type)
        self._encoder = msgspec.msgpack.Encoder()

    def encode_batch(self, batch: pa.RecordBatch) -> tuple[pa.Array, pa.Array]:
        """The batch's keys and values as large_binary arrays, built a column at a time
        (``column_encoding``) where the columns' types allow, else row by row."""
        layout = self.layout
        key_column = batch.column(batch.schema.get_field_index(layout.key_column))
        if key_column.null_count:
            raise RowError(f"shardgrid: a row has a null key (column '{layout.key_column}'); every row needs a key")
        keys = serialized_keys(key_column, layout.key_type)
        if keys is None:
            keys = pa.array(self._dump_keys(key_column.to_pylist()), BYTES)
        if layout.value_column is not None:
            column = batch.column(batch.schema.get_field_index(layout.value_column))
            if column.null_count:
                raise RowError(self._null_value_problem())
            return keys, column.cast(BYTES)  # a string's UTF-8 bytes, or the binary as it is
        values = map_values(batch, layout.map_fields)
        if values is None:
            encode = self._encoder.encode
            values = pa.array([encode(row) for row in batch.select(list(layout.map_fields)).to_pylist()], BYTES)
        return keys, values

    def ttls_of_batch(self, batch: pa.RecordBatch) -> np.ndarray | None:
        """Each row's TTL in ms (``ttls_ms_of``), or None when the layout has no TTL column."""
        column = self.layout.ttl_column
        if column is None:
            return None
        return ttls_ms_of(batch.column(batch.schema.get_field_index(column)), column)

    def ttls_of_rows(self, rows: Sequence[Any]) -> np.ndarray | None:
        """``ttls_of_batch`` for Spark ``Row`` objects."""
        column = self.layout.ttl_column
        if column is None:
            return None
        index = self.layout.field_names.index(column)
        return ttls_ms_of([row[index] for row in rows], column)

    def encode_rows(self, rows: Sequence[Any]) -> tuple[list[bytes], list[bytes]]:
        """Spark ``Row`` objects (the streaming writer's input), in schema order."""
        layout = self.layout
        key_index = layout.field_names.index(layout.key_column)
        raw_keys = [row[key_index] for row in rows]
        if any(key is None for key in raw_keys):
            raise RowError(f"shardgrid: a row has a null key (column '{layout.key_column}'); every row needs a key")
        keys = self._dump_keys(raw_keys)
        if layout.value_column is not None:
            value_index = layout.field_names.index(layout.value_column)
            return keys, self._plain_values([row[value_index] for row in rows], keys)
        encode = self._encoder.encode
        left_out = (layout.key_column, layout.ttl_column)
        # asDict(recursive=True): a struct is a Row (a tuple) inside a Row; stored as the batch
        # writer stores it, a map of its fields, so either writer's entries read back alike.
        return keys, [
            encode({name: value for name, value in row.asDict(recursive=True).items() if name not in left_out})
            for row in rows
        ]

    def _dump_keys(self, raw: list[Any]) -> list[bytes]:
        """The key column serialized. Arrow's column types vouch for every key's type, so the
        common columns take one C-speed pass (``serialize_key``'s forms exactly); the rest, and any
        column the fast pass doubts, go key by key through the client's checks and messages."""
        kind = self.layout.key_type
        try:
            if kind is KeyType.LONG and raw and min(raw) >= INT32_MIN and max(raw) <= INT32_MAX:
                if all(type(key) is int for key in raw):
                    return list(map(_INT32.pack, raw))
            elif kind is KeyType.STRING and all(type(key) is str for key in raw):
                pack = _INT32.pack
                return [pack(len(encoded)) + encoded for encoded in [key.encode() for key in raw]]
        except (TypeError, UnicodeEncodeError):
            pass  # None, a bool or a lone surrogate among them: the checks below name it
        dump = self._keys.dumps
        try:
            return [dump(key) for key in raw]
        except (TypeError, ValueError) as error:
            raise RowError(f"shardgrid: key column '{self.layout.key_column}': {error}") from None

    def _null_value_problem(self) -> str:
        return (
            f"shardgrid: a row has a null in value column '{self.layout.value_column}': a value stored as it is "
            "cannot be null"
        )

    def _plain_values(self, raw: list[Any], keys: list[bytes]) -> list[bytes]:
        if any(value is None for value in raw):
            raise RowError(self._null_value_problem())
        if self.layout.value_is_text:
            return [value.encode() for value in raw]
        return raw


def spark_type_name_of(value: Any) -> str | None:
    """The Spark type a sampled value infers (None: it says nothing, being null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes):
        return "binary"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    raise RowError(
        f"a sampled value of type {type(value).__name__} has no column type: "
        "give the schema (.schema() in Spark, --schema to pipeline export)"
    )


class EntryDecoder:
    """Entries to Arrow record batches of exactly ``schema`` (a Spark schema, as Arrow)."""

    def __init__(self, layout: Layout, schema: pa.Schema) -> None:
        self.layout = layout
        self.schema = schema
        self._keys = key_serializer(layout.key_type)
        self._decoder = msgspec.msgpack.Decoder()
        self._rows = _typed_row_decoder(schema, layout.map_fields) if layout.value_column is None else None
        self._map_columns = MapColumns(schema, layout.map_fields) if layout.value_column is None else None

    def decode(self, keys: Sequence[bytes] | pa.Array, values: Sequence[bytes] | pa.Array) -> pa.RecordBatch:
        """Keys and values as lists of bytes, or as large_binary arrays (a packed scan's)."""
        keys, values = as_binary(keys), as_binary(values)
        parsed = self._decode_columns(keys, values)
        return parsed if parsed is not None else self._decode_rows(keys.to_pylist(), values.to_pylist())

    def _decode_columns(self, keys: pa.Array, values: pa.Array) -> pa.RecordBatch | None:
        """The batch parsed a column at a time (``column_decoding``); None when an entry is not
        of the exact layout that parse takes, or does not fit the schema: the row-by-row decode
        then takes the batch and names what is wrong."""
        layout = self.layout
        key_field = self.schema.field(layout.key_column)
        keys_read = key_column(keys, layout.key_type, key_field.type)
        if keys_read is None:
            return None
        columns = {layout.key_column: keys_read}
        if layout.value_column is not None:
            kind = self.schema.field(layout.value_column).type
            try:
                columns[layout.value_column] = values.cast(kind)  # checks UTF-8
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
        elif self._map_columns is not None:
            parsed = self._map_columns.parse(values)
            if parsed is None:
                return None
            columns.update(parsed)
        if any(field.name not in columns for field in self.schema):
            return None  # a column no entry fills: the row decoder names it
        arrays = [columns[field.name] for field in self.schema]
        if any(array.null_count and not field.nullable for array, field in zip(arrays, self.schema, strict=True)):
            return None
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _decode_rows(self, keys: Sequence[bytes], values: Sequence[bytes]) -> pa.RecordBatch:
        layout = self.layout
        # Columns whose values are already of their Arrow type: the keys, as the key type loads
        # them, and the value columns the typed decode checked.
        checked = {layout.key_column}
        try:
            columns: dict[str, list[Any]] = {layout.key_column: self._load_keys(keys)}
        except (TypeError, ValueError) as error:
            raise RowError(
                f"shardgrid: key column '{layout.key_column}' ({layout.key_type.value}): a stored key is not one: "
                f"{error} (is the map's key type another? see key.type)"
            ) from None
        if layout.value_column is not None:
            try:
                columns[layout.value_column] = (
                    [value.decode() for value in values] if layout.value_is_text else list(values)
                )
            except UnicodeDecodeError as error:
                # Found by an outside tester: this escaped as Python's own error, naming nothing.
                raise RowError(
                    f"shardgrid: value column '{layout.value_column}' is a string column, but a stored value is "
                    f"not UTF-8 ({error}); declare the column binary"
                ) from None
        elif self._rows is not None and (typed := _typed_columns(self._rows, values)) is not None:
            columns.update(typed)
            checked |= self._rows.plain_names
        else:
            decode = self._decoder.decode
            try:
                decoded = [decode(value) for value in values]
            except (msgspec.DecodeError, UnicodeDecodeError) as error:
                # Found by a hostile-input test: these escaped as msgspec's own errors, naming nothing.
                raise RowError(
                    f"shardgrid: a stored value is not msgpack ({error}): the map was written another way; "
                    "read each value as it is with value.column"
                ) from None
            fields = layout.map_fields
            if fields == (PLAIN_VALUE_COLUMN,) and not all(isinstance(entry, dict) for entry in decoded):
                columns[PLAIN_VALUE_COLUMN] = decoded
            else:
                for name in fields:
                    columns[name] = [entry.get(name) if isinstance(entry, dict) else None for entry in decoded]
        arrays = []
        for field in self.schema:
            try:
                column = columns[field.name]
                ready = column if field.name in checked else _as_column_type(column, field.type)
                array = pa.array(ready, type=field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, ArithmeticError) as error:
                # ValueError, ArithmeticError: stored text that is no date, time or decimal (found
                # by an outside tester: it escaped as the parser's own error).
                problem = f"shardgrid: column '{field.name}' ({field.type}): an entry does not fit: {error}"
                raise RowError(problem) from None
            if array.null_count and not field.nullable:
                # Arrow does not check this, and Spark failed later with no word of the column.
                raise RowError(
                    f"shardgrid: column '{field.name}' is declared not null, but an entry has no value for it "
                    "(declare the column nullable in the schema)"
                )
            arrays.append(array)
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _load_keys(self, keys: Sequence[bytes]) -> list[Any]:
        """The key column; long keys all of one width (the common case) in one unpack."""
        if self.layout.key_type is KeyType.LONG and keys:
            widths = set(map(len, keys))
            if widths == {4}:
                return list(struct.unpack(f">{len(keys)}i", b"".join(keys)))
            if widths == {8}:
                return list(struct.unpack(f">{len(keys)}q", b"".join(keys)))
        load_key = self._keys.loads
        return [load_key(key) for key in keys]


@dataclass(frozen=True, slots=True)
class TypedRows:
    """A msgpack decoder of one entry into a struct with the value columns as fields, the getter of
    those fields, their names, and those whose type the decoder checks (the rest are ``Any``)."""

    decode: Callable[[bytes], Any]
    getter: Callable[[Any], Any]
    names: tuple[str, ...]
    plain_names: frozenset[str]


def _typed_row_decoder(schema: pa.Schema, fields: tuple[str, ...]) -> TypedRows | None:
    """Each field optional and extra entries ignored, as the general decode treats them; None when
    there is no value column to decode."""
    if not fields:
        return None
    spec: list[tuple[str, Any, None]] = []
    plain: set[str] = set()
    for index, name in enumerate(fields):
        python_type = _plain_type_of(schema.field(name).type)
        if python_type is not None:
            plain.add(name)
        spec.append((f"f{index}", Any if python_type is None else python_type | None, None))
    rename = {f"f{index}": name for index, name in enumerate(fields)}
    row = msgspec.defstruct("EntryRow", spec, rename=rename)
    getter = attrgetter(*(attribute for attribute, _, _ in spec))
    return TypedRows(msgspec.msgpack.Decoder(row).decode, getter, fields, frozenset(plain))


def _typed_columns(typed: TypedRows, values: Sequence[bytes]) -> dict[str, list[Any]] | None:
    """The value columns through the decoder typed by the schema (no dict per entry), or None when
    an entry is anything else than a map of those types: the general decode then sorts it out and
    names the column at fault."""
    decode = typed.decode
    try:
        rows = [decode(value) for value in values]
    except (msgspec.MsgspecError, UnicodeDecodeError):  # msgspec's error for a str that is not UTF-8
        return None
    names, getter = typed.names, typed.getter
    if len(names) == 1:
        return {names[0]: list(map(getter, rows))}
    if not rows:
        return {name: [] for name in names}
    return {name: list(column) for name, column in zip(names, zip(*map(getter, rows), strict=True), strict=True)}


def _plain_type_of(arrow_type: pa.DataType) -> type | None:
    return next((kind for test, kind in _PLAIN_TYPES if test(arrow_type)), None)


def _as_column_type(column: list[Any], arrow_type: pa.DataType) -> list[Any]:
    """Decoded values ready for ``pa.array`` of the column's type. msgpack has no decimal, date or
    zone-less timestamp: the writer's encoder stored them as ISO text (lossless), and a schema asking
    for one gets it back. An integer column takes integers only (pyarrow would truncate floats)."""
    if pa.types.is_integer(arrow_type):
        # pyarrow would truncate 2.5 to 2 without a word: a value that is not an integer is an error.
        for value in column:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise pa.ArrowInvalid(f"{value!r} is not an integer")
        return column
    if pa.types.is_decimal(arrow_type):
        parse: Any = decimal.Decimal
    elif pa.types.is_date(arrow_type):
        parse = datetime.date.fromisoformat
    elif pa.types.is_timestamp(arrow_type):
        parse = datetime.datetime.fromisoformat
    else:
        return column
    return [parse(value) if isinstance(value, str) else value for value in column]
