"""A response message already serialized, which grpc sends as it is.

A method registered through `grpc_support.add_servicer_sending_serialized` may yield a
`Serialized` instead of a message: its `wire` bytes are exactly what the message's
`SerializeToString()` would give, made once and kept (window entries encoded in the
entry cache, decoded image chunks), so grpc does not parse or serialize them again.
No grpc import here: domain modules may build these.
"""

from __future__ import annotations


class Serialized:
    """One serialized response message; `wire` goes on the wire unchanged."""

    __slots__ = ("wire",)

    def __init__(self, wire: bytes) -> None:
        self.wire = wire


def varint(value: int) -> bytes:
    """A protobuf base-128 varint."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field_header(number: int, length: int) -> bytes:
    """The tag and length that start a length-delimited protobuf field of `length` bytes."""
    return varint(number << 3 | 2) + varint(length)


def length_delimited(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field on the wire: its tag, its length, its bytes."""
    return field_header(number, len(payload)) + payload
