"""The one JSON shape of every message that leaves as JSON: the proto3 canonical JSON mapping.

The CLI's `--json`, the gateway's API and exports print sessions, windows, insight and search
hits through `message_json`, so a field has one name everywhere: the mapping's lowerCamelCase
name, with int64 as a decimal string, Timestamps as RFC 3339 and every field present (unset
scalars as their zero value), as grpc-gateway prints them by default.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message


def message_json(message: Message) -> dict[str, Any]:
    """`message` in the canonical JSON mapping, as a dict ready for a JSON encoder."""
    result: dict[str, Any] = MessageToDict(message, always_print_fields_with_no_presence=True)
    return result
