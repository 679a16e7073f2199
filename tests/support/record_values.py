"""Hypothesis strategies of Kafka record values and keys as careless producers write them: random
bytes, JSON objects written compactly or spaced, escaped or not (lone surrogates included), and
valid objects with one careless change (a byte replaced, inserted or dropped, cut short, something
before or after), for a flat schema with the fields i, l, d, s, b, f."""
from __future__ import annotations

import json

from hypothesis import strategies as st

_names = st.sampled_from(["i", "l", "d", "s", "b", "f", "I", "x", ""])
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2 ** 70, max_value=2 ** 70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
    st.sampled_from(["\ud800", "\udc00x", "é😀", "\x00", "\\", '"']),
)
_json_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_names, inner, max_size=3)), max_leaves=8)
_objects = st.dictionaries(_names, _json_values, max_size=6)


@st.composite
def _object_text(draw) -> bytes:
    """A JSON object as a producer might write it: compact or spaced, escaped or not."""
    text = json.dumps(draw(_objects), ensure_ascii=draw(st.booleans()),
                      separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])))
    return text.encode("utf-8", "surrogatepass")


@st.composite
def _mutated(draw) -> bytes:
    """A valid object's text with one careless change: a byte replaced, inserted or dropped, cut
    short, or something before or after it."""
    value = draw(_object_text())
    at = draw(st.integers(min_value=0, max_value=len(value)))
    byte = bytes([draw(st.integers(min_value=0, max_value=255))])
    change = draw(st.sampled_from(["replace", "insert", "drop", "cut", "append", "prepend"]))
    if change == "replace":
        return value[:at] + byte + value[at + 1:]
    if change == "insert":
        return value[:at] + byte + value[at:]
    if change == "drop":
        return value[:at] + value[at + 1:]
    if change == "cut":
        return value[:at]
    extra = draw(st.sampled_from([b" x", b"{}", b"],[{}", b"\n", b" \t\r\n", b"\xef\xbb\xbf", b"\xff", b"NaN", b"-Inf", b","]))
    return value + extra if change == "append" else extra + value


def record_values(limit: int) -> st.SearchStrategy[bytes | None]:
    """Values (None: a tombstone), some of them one byte past ``limit``."""
    return st.one_of(st.none(), st.binary(max_size=40), _object_text(), _mutated(),
                     st.sampled_from([b"", b" ", b"null", b"[]", b"{}", b'{"d":NaN}', b'{"d":Infinity}',
                                      b'{"d":-Inf}', b'{"i":1,"x": Inf}', b'{"s":"' + b"y" * (limit - 7) + b'"}']))


record_keys = st.one_of(st.none(), st.binary(max_size=6))


