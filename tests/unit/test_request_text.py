"""The U+0000 rule of scrollback.contract.text over request messages (pure)."""

from __future__ import annotations

from google.protobuf.struct_pb2 import Struct

from scrollback.contract.text import indexable, nul_field
from scrollback.history.v1 import history_pb2 as pb
from scrollback.media.v1 import media_pb2 as mpb
from scrollback.search.v1 import search_pb2 as spb


def test_only_a_message_text_may_hold_nul() -> None:
    assert nul_field(pb.AcceptMessageRequest(client_txn_id="t", chat_key="k", text="a\0b")) is None
    assert nul_field(pb.AcceptedMessage(text="\0")) == "scrollback.history.v1.AcceptedMessage.text"
    assert nul_field(pb.AcceptMessageRequest(chat_key="k\0")) == (
        "scrollback.history.v1.AcceptMessageRequest.chat_key"
    )


def test_nested_repeated_and_map_fields_are_walked() -> None:
    attached = pb.AcceptMessageRequest(
        text="\0", attachments=[pb.Attachment(name="a"), pb.Attachment(media_type="x\0")]
    )
    assert nul_field(attached) == "scrollback.history.v1.Attachment.media_type"
    assert nul_field(spb.SearchRequest(roles=["user", "as\0"])) == (
        "scrollback.search.v1.SearchRequest.roles"
    )
    header = mpb.WriteBlobHeader(media_type="image/png\0")
    assert nul_field(mpb.WriteBlobRequest(header=header)) == (
        "scrollback.media.v1.WriteBlobHeader.media_type"
    )
    assert nul_field(mpb.WriteBlobRequest(data=b"\0\0")) is None, "bytes are not text"
    key, value, nested = Struct(), Struct(), Struct()
    key.update({"k\0": 1})
    value.update({"k": "v\0"})
    nested.update({"outer": {"inner": ["x", "y\0"]}})
    assert nul_field(key) == "google.protobuf.Struct.fields"
    assert nul_field(value) == "google.protobuf.Value.string_value"
    assert nul_field(nested) == "google.protobuf.Value.string_value"
    assert nul_field(spb.SearchRequest(query="plain", entry_types=["user"])) is None


def test_indexable_writes_nul_as_the_replacement_character() -> None:
    assert indexable("a\0b\0") == "a\ufffdb\ufffd"
    assert indexable("plain \U0001f642") == "plain \U0001f642"
