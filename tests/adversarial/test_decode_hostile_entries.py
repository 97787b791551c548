"""Outside tester: ``EntryDecoder._decode_columns`` (the numpy/Arrow-view parse) against the
row-by-row decode, on hostile and non-canonical msgpack: every int form, str/bin forms at view
boundaries, nil, map16/map32 headers, fields shuffled/missing/extra/repeated, truncation, trailing
bytes, lying string-key prefixes, odd long-key widths, many column types. The column parse must
give the row decoder's batch (valid Arrow) or None, never raise; the whole decode must give a batch
or a RowError.

The last tests are failures found (in the row path, which ``decode`` falls back to)."""

from __future__ import annotations

import math
import random
import struct

import msgspec
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardgrid.core.hashing import serialize_key
from shardgrid.spark.columns import EntryDecoder, RowError, layout_of


def pk_int(v, r):
    forms = []
    if 0 <= v <= 127:
        forms.append(bytes([v]))
    if -32 <= v < 0:
        forms.append(bytes([v & 0xFF]))
    for code, fmt, lo, hi in [
        (0xCC, ">B", 0, 255),
        (0xCD, ">H", 0, 65535),
        (0xCE, ">I", 0, 2**32 - 1),
        (0xCF, ">Q", 0, 2**64 - 1),
        (0xD0, ">b", -128, 127),
        (0xD1, ">h", -(2**15), 2**15 - 1),
        (0xD2, ">i", -(2**31), 2**31 - 1),
        (0xD3, ">q", -(2**63), 2**63 - 1),
    ]:
        if lo <= v <= hi:
            forms.append(bytes([code]) + struct.pack(fmt, v))
    return r.choice(forms)


def pk_str(b, r, binary=False):
    n = len(b)
    forms = []
    if binary:
        codes = [(0xC4, ">B", 255), (0xC5, ">H", 65535), (0xC6, ">I", 2**32 - 1)]
    else:
        if n < 32:
            forms.append(bytes([0xA0 | n]) + b)
        codes = [(0xD9, ">B", 255), (0xDA, ">H", 65535), (0xDB, ">I", 2**32 - 1)]
    for code, fmt, hi in codes:
        if n <= hi:
            forms.append(bytes([code]) + struct.pack(fmt, n) + b)
    return r.choice(forms)


def pk_map_header(n, r):
    forms = []
    if n < 16:
        forms.append(bytes([0x80 | n]))
    forms.append(b"\xde" + struct.pack(">H", n))
    forms.append(b"\xdf" + struct.pack(">I", n))
    return forms[0] if r.random() < 0.8 else r.choice(forms)


INTS = [
    0,
    1,
    127,
    128,
    255,
    256,
    -1,
    -32,
    -33,
    -128,
    -129,
    32767,
    32768,
    -32768,
    -32769,
    65535,
    65536,
    2**31 - 1,
    2**31,
    -(2**31),
    -(2**31) - 1,
    2**32 - 1,
    2**32,
    2**53 + 1,
    2**63 - 1,
    -(2**63),
    2**63,
    2**64 - 1,
]
STRLENS = [0, 1, 7, 8, 11, 12, 13, 31, 32, 255, 256, 65535, 65536]


def rand_text_bytes(r, n):
    c = r.random()
    if c < 0.6:
        return bytes(r.choice(b"abcxyz") for _ in range(n))
    if c < 0.8:
        s = "".join(r.choice(["a", "é", "€", "😀", "\u0800", "\uffff"]) for _ in range(n))
        return s.encode()[:n] if r.random() < 0.3 else s.encode()
    return bytes(r.randrange(256) for _ in range(n))


WRONG = [0.05]


def rand_value(r, typ):
    """packed value bytes for a column of type typ (sometimes of another type)."""
    c = r.random()
    if c < 0.08:
        return b"\xc0"
    if c < 0.08 + WRONG[0]:
        typ = r.choice(["int", "bool", "f64", "f32", "str", "bin", "arr", "map"])
    if typ == "int":
        v = r.choice(INTS) if r.random() < 0.7 else r.randint(-(2**63), 2**64 - 1)
        return pk_int(v, r)
    if typ == "bool":
        return r.choice([b"\xc2", b"\xc3"])
    if typ == "f64":
        if r.random() < 0.2:
            return pk_int(r.choice(INTS), r)
        return b"\xcb" + struct.pack(">d", r.choice([0.0, -0.0, 1.5, math.inf, -math.inf, 1e308, 5e-324, r.random()]))
    if typ == "f32":
        return b"\xca" + struct.pack(">f", r.random())
    if typ == "str":
        n = r.choice(STRLENS) if r.random() < 0.3 else r.randint(0, 40)
        return pk_str(rand_text_bytes(r, n), r)
    if typ == "bin":
        n = r.choice(STRLENS) if r.random() < 0.3 else r.randint(0, 40)
        return pk_str(bytes(r.randrange(256) for _ in range(n)), r, binary=True)
    if typ == "arr":
        return b"\x92\x01\x02"
    if typ == "map":
        return b"\x81\xa1a\x01"
    if typ == "date":
        return pk_str(b"2020-01-02", r)
    return b"\xc0"


ARROW = {
    "int8": (pa.int8(), "int"),
    "int16": (pa.int16(), "int"),
    "int32": (pa.int32(), "int"),
    "int64": (pa.int64(), "int"),
    "uint8": (pa.uint8(), "int"),
    "bool": (pa.bool_(), "bool"),
    "f64": (pa.float64(), "f64"),
    "f32": (pa.float32(), "f64"),
    "str": (pa.string(), "str"),
    "lstr": (pa.large_string(), "str"),
    "bin": (pa.binary(), "bin"),
    "lbin": (pa.large_binary(), "bin"),
    "date": (pa.date32(), "date"),
    "ts": (pa.timestamp("us"), "date"),
    "dec": (pa.decimal128(10, 2), "str"),
}
COMMON = ["int64", "int32", "int8", "int16", "bool", "f64", "str", "lstr", "bin", "lbin"]
RARE = ["uint8", "f32", "date", "ts", "dec"]
KEYTYPES = ["int64", "int32", "int16", "int8", "str", "lstr", "bin", "lbin"]


def rand_key(r, kt):
    c = r.random()
    if kt.startswith("int"):
        if c < 0.05:
            return bytes(r.randrange(256) for _ in range(r.choice([0, 1, 3, 5, 7, 9, 12])))
        v = r.choice(INTS[:-2]) if r.random() < 0.5 else r.randint(-(2**63), 2**63 - 1)
        if r.random() < 0.5:
            v = r.randint(-130, 130)
        return serialize_key(v)
    if kt in ("str", "lstr"):
        if c < 0.05:
            b = rand_text_bytes(r, r.randint(0, 20))
            lie = len(b) + r.choice([-1, 1, 2**32 - len(b) - 1 if len(b) else 5, -len(b) - 1])
            return struct.pack(">I", lie % 2**32) + b
        if c < 0.08:
            return bytes(r.randrange(256) for _ in range(r.choice([0, 1, 2, 3])))
        if c < 0.15:
            b = rand_text_bytes(r, r.randint(0, 20))
            return struct.pack(">I", len(b)) + b
        n = r.choice(STRLENS[:9]) if r.random() < 0.3 else r.randint(0, 30)
        return serialize_key("".join(r.choice("ab€😀") for _ in range(n)))
    return bytes(r.randrange(256) for _ in range(r.randint(0, 30)))


def mutate(r, b):
    c = r.random()
    if c < 0.3 and b:
        return b[: r.randrange(len(b))]
    if c < 0.5:
        return b + bytes([r.randrange(256)])
    if c < 0.7 and b:
        i = r.randrange(len(b))
        return b[:i] + bytes([r.randrange(256)]) + b[i + 1 :]
    if c < 0.8:
        return bytes(r.randrange(256) for _ in range(r.randint(0, 12)))
    return b""


def rand_row(r, fields, types, mode):
    names = list(fields)
    if mode > 0.85:
        rr = r.random()
        if rr < 0.25:
            r.shuffle(names)
        elif rr < 0.45 and names:
            names.pop(r.randrange(len(names)))
        elif rr < 0.65:
            names.insert(r.randrange(len(names) + 1), r.choice(["zz", *names]) if names else "zz")
        elif rr < 0.8 and names:
            names.insert(r.randrange(len(names) + 1), r.choice(names))
    body = pk_map_header(len(names), r)
    for n in names:
        t = ARROW[types[n]][1] if n in types else "int"
        body += pk_str(n.encode(), r) if r.random() < 0.97 else pk_str(n.encode(), r, binary=True)
        body += rand_value(r, t)
    if mode > 0.97:
        body = mutate(r, body)
    if 0.96 < mode <= 0.97:
        body = msgspec.msgpack.encode(r.choice([1, "s", None, [1], b"x"]))
    return body


def one(seed):
    r = random.Random(seed)
    kt = r.choice(KEYTYPES)
    nf = r.choice([0, 1, 1, 2, 3, 4, 5, 15, 16, 17, 20])
    pool = COMMON * 4 + RARE if r.random() < 0.8 else COMMON
    types = {f"f{i}" if r.random() < 0.9 else f"c{i}_{'é' * (i % 2)}": r.choice(pool) for i in range(nf)}
    if r.random() < 0.05:
        types = {"value": r.choice(COMMON)}
    flds = [pa.field("k", ARROW[kt][0], nullable=r.random() < 0.2)]
    flds += [pa.field(n, ARROW[t][0], nullable=r.random() < 0.85) for n, t in types.items()]
    if r.random() < 0.3:  # key in the middle
        kf = flds.pop(0)
        flds.insert(r.randint(0, len(flds)), kf)
    schema = pa.schema(flds)
    valcol = None
    if r.random() < 0.03:
        cand = [n for n, t in types.items() if t in ("str", "lstr", "bin", "lbin")]
        if cand:
            valcol = cand[0]
            schema = pa.schema([f for f in schema if f.name in ("k", valcol)])
    layout = layout_of(schema, "k", valcol)
    dec = EntryDecoder(layout, schema)
    rows = r.choice([0, 1, 1, 2, 3, 5, 10, 50, 200])
    mode_bias = r.random()
    WRONG[0] = r.choice([0.0, 0.0, 0.001, 0.01, 0.05])
    if r.random() < 0.5:
        mode_bias = r.choice([0.0, 0.001, 0.01])
    if r.random() < 0.03:
        rows = 1000
    keys = [rand_key(r, kt) for _ in range(rows)]
    if valcol:
        isstr = types[valcol] in ("str", "lstr")
        values = [
            rand_text_bytes(r, r.randint(0, 30)) if isstr else bytes(r.randrange(256) for _ in range(r.randint(0, 30)))
            for _ in range(rows)
        ]
    else:
        values = [rand_row(r, list(types), types, r.random() if r.random() < mode_bias else 0.0) for _ in range(rows)]
    return dec, keys, values, schema


def _compare(dec, keys, values):
    try:
        rows = dec._decode_rows(keys, values)
        error = None
    except Exception as caught:
        rows, error = None, caught
    parsed = dec._decode_columns(
        pa.array(keys, pa.large_binary()), pa.array(values, pa.large_binary())
    )  # must not raise
    if parsed is not None:
        parsed.validate(full=True)
        assert error is None, f"columns took a batch the row decoder refuses: {error!r}"
        for got, want in zip(parsed.columns, rows.columns, strict=True):
            if pa.types.is_floating(got.type):
                assert repr(got.to_pylist()) == repr(want.to_pylist())
            else:
                assert got.equals(want)
    return rows, error


@settings(max_examples=40, deadline=None, derandomize=False)  # 3,600 batches searched when it was written
@given(st.integers(0, 2**32))
def test_column_parse_is_the_row_decode_or_none(seed):
    dec, keys, values, _ = one(seed)
    _compare(dec, keys, values)


@pytest.mark.parametrize("column", [pa.int8(), pa.int16(), pa.int32(), pa.int64()])
def test_every_int_form_one_row_and_batch(column):
    schema = pa.schema([pa.field("k", pa.int64(), False), pa.field("v", column)])
    dec = EntryDecoder(layout_of(schema, "k", None), schema)
    r = random.Random(0)
    batch_values = []
    for value in INTS:
        for _ in range(6):
            packed = b"\x81\xa1v" + pk_int(value, r)
            batch_values.append(packed)
            _compare(dec, [serialize_key(1)], [packed])
    _compare(dec, [serialize_key(i) for i in range(len(batch_values))], batch_values)


@pytest.mark.parametrize("column", [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()])
def test_str_and_bin_forms_at_every_boundary_length(column):
    schema = pa.schema([pa.field("k", pa.string(), False), pa.field("v", column), pa.field("w", pa.int8())])
    dec = EntryDecoder(layout_of(schema, "k", None), schema)
    r = random.Random(1)
    values = []
    for n in [0, 1, 7, 8, 11, 12, 13, 31, 32, 255, 256, 65535, 65536]:
        for binary in (False, True):
            for _ in range(3):
                packed = b"\x82\xa1v" + pk_str(b"\xc3\xa9" * (n // 2) + b"a" * (n % 2), r, binary) + b"\xa1w\x05"
                values.append(packed)
                _compare(dec, [serialize_key("k")], [packed])
    _compare(dec, [serialize_key(str(i)) for i in range(len(values))], values)


def test_string_keys_with_lying_prefixes_and_long_keys_of_odd_widths():
    for kind, keys in [
        (pa.string(), [b"\x00\x00\x00\x02ab", b"\x00\x00\x00\x03ab", b"\xff\xff\xff\xfe", b"\x00\x00\x00", b""]),
        (pa.int64(), [b"\x00" * 4, b"\x00" * 8, b"\x00" * 5, b"", b"\x80" + b"\x00" * 7, b"\x00\x00\x00\x05"]),
        (pa.int8(), [serialize_key(127), serialize_key(128), serialize_key(-128), serialize_key(2**40)]),
    ]:
        schema = pa.schema([pa.field("k", kind, False), pa.field("v", pa.int64())])
        dec = EntryDecoder(layout_of(schema, "k", None), schema)
        for key in keys:
            _compare(dec, [key], [b"\x81\xa1v\x01"])
        _compare(dec, keys, [b"\x81\xa1v\x01"] * len(keys))


# --- failures found (fixed in 8e902d6) -----------------------------------------------------------------------------


def test_value_column_text_not_utf8_is_a_row_error():
    """value.column of type string, a stored value that is not UTF-8: decode() raises Python's
    UnicodeDecodeError (row path, ``value.decode()``) instead of a RowError naming the column."""
    schema = pa.schema([pa.field("k", pa.int64(), False), pa.field("v", pa.string())])
    dec = EntryDecoder(layout_of(schema, "k", "v"), schema)
    with pytest.raises(RowError):
        dec.decode([serialize_key(1)], [b"\xff"])


@pytest.mark.parametrize(
    ("column", "stored"),
    [(pa.decimal128(10, 2), "abc"), (pa.date32(), "not a date"), (pa.timestamp("us"), "not a time")],
)
def test_a_text_value_that_does_not_parse_as_the_column_type_is_a_row_error(column, stored):
    """decimal/date/timestamp columns: a stored str that does not parse escapes as
    decimal.InvalidOperation / ValueError from ``_as_column_type`` instead of a RowError."""
    schema = pa.schema([pa.field("k", pa.int64(), False), pa.field("v", column)])
    dec = EntryDecoder(layout_of(schema, "k", None), schema)
    with pytest.raises(RowError):
        dec.decode([serialize_key(1)], [msgspec.msgpack.encode({"v": stored})])


def test_value_column_with_another_schema_column_does_not_crash_the_column_parse():
    """value.column set and the read schema (``.schema()``) has a third column: ``_decode_columns``
    raises KeyError (so does the row path) instead of returning None / a RowError."""
    schema = pa.schema([pa.field("k", pa.int64(), False), pa.field("v", pa.binary()), pa.field("x", pa.int64())])
    dec = EntryDecoder(layout_of(schema, "k", "v"), schema)
    assert (
        dec._decode_columns(pa.array([serialize_key(1)], pa.large_binary()), pa.array([b"a"], pa.large_binary()))
        is None
    )
