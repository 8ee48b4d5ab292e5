"""Domain results as HistoryService messages: sessions, insight, accepted messages, slim copies.

The servicer builds its responses with these (and a window's with
`history_service.window_wire`); no call and no error handling here.
"""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp

from history_service.accept import AcceptedRecord
from history_service.image_list import ImageRecord
from history_service.insight import SessionDetail
from history_service.insight_model import Insight, Usage
from history_service.sessions import SessionInfo
from history_service.slim import SlimStats
from scrollback.history.v1 import history_pb2 as pb
from scrollback.ref.v1 import ref_pb2


def timestamp_of(seconds: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def timestamp_of_ns(nanoseconds: int) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(nanoseconds)
    return stamp


def _micros(value: int) -> Timestamp:
    stamp = Timestamp()
    stamp.FromMicroseconds(value)
    return stamp


def _usage(usage: Usage) -> pb.TokenUsage:
    return pb.TokenUsage(
        input_tokens=usage.input,
        output_tokens=usage.output,
        cache_creation_input_tokens=usage.cache_creation,
        cache_read_input_tokens=usage.cache_read,
    )


def insight_proto(insight: Insight) -> pb.SessionInsight:
    """The proto of a session's insight."""
    message = pb.SessionInsight(
        entry_counts=[
            pb.EntryTypeCount(type=kind, count=count)
            for kind, count in sorted(insight.entry_counts.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        photo_count=insight.photos,
        models=[
            pb.ModelUsage(
                model=m.model,
                usage=_usage(m.usage),
                messages=m.messages,
                cost_usd=m.cost or 0.0,
                cost_known=m.cost is not None,
            )
            for m in insight.models
        ],
        usage=_usage(insight.usage),
        cost_usd=insight.cost,
        cost_complete=insight.cost_complete,
        indexed_bytes=insight.indexed_bytes,
    )
    if insight.first_time_us is not None:
        message.first_time.CopyFrom(_micros(insight.first_time_us))
    if insight.last_time_us is not None:
        message.last_time.CopyFrom(_micros(insight.last_time_us))
    return message


def session_message(info: SessionInfo, detail: SessionDetail | None = None) -> pb.Session:
    modified = Timestamp()
    modified.FromNanoseconds(info.modified_ns)
    session = pb.Session(
        session_id=info.session_id,
        project_dir=info.project_dir,
        size_bytes=info.size_bytes,
        modified_time=modified,
        title=info.title,
        is_subagent=info.is_subagent,
        parent_session_id=info.parent_session_id,
        source=info.source,
        slim_copy_of=info.slim_copy_of,
    )
    if detail is not None:
        if detail.insight is not None:
            session.insight.CopyFrom(insight_proto(detail.insight))
        if detail.subagent_insight is not None:
            session.subagent_insight.CopyFrom(insight_proto(detail.subagent_insight))
        session.subagent_count = detail.subagent_count
        session.parent_session_id = detail.parent_session_id
        session.parent_tool_use_id = detail.parent_tool_use_id
        session.followed = detail.followed
    return session


def accepted_message(record: AcceptedRecord) -> pb.AcceptedMessage:
    return pb.AcceptedMessage(
        seq=record.public_seq,
        client_txn_id=record.client_txn_id,
        session_id=record.session_id,
        chat_key=record.chat_key,
        text=record.text,
        attachments=[
            pb.Attachment(ref=a.ref, name=a.name, media_type=a.media_type)
            for a in record.attachments
        ],
        accepted_time=timestamp_of(record.accepted_at),
    )


def file_end_message(stats: SlimStats) -> pb.SlimFileEnd:
    return pb.SlimFileEnd(
        lines=stats.lines,
        images_replaced=stats.images_replaced,
        documents_replaced=stats.documents_replaced,
        copies_replaced=stats.copies_replaced,
        images_downscaled=stats.images_downscaled,
        images_kept=stats.images_kept,
        bytes_read=stats.bytes_read,
        bytes_written=stats.bytes_written,
        omitted_tail_bytes=stats.omitted_tail_bytes,
        not_downscaled=[
            pb.NotDownscaled(reason=reason, images=count)
            for reason, count in stats.not_downscaled.items()
        ],
    )


def image_info_message(record: ImageRecord) -> pb.ImageInfo:
    facts = record.facts
    info = pb.ImageInfo(
        session_id=record.session_id,
        entry_uuid=record.entry_uuid,
        api_path=record.api_path,
        kind=record.kind,
        declared_media_type=record.declared_media_type,
        media_type=facts.header.media_type if facts.header is not None else "",
        size_bytes=facts.size_bytes,
        width=facts.header.width if facts.header is not None else 0,
        height=facts.header.height if facts.header is not None else 0,
        problems=record.problems,
        sha256=facts.sha256,
        line_number=record.line_number,
    )
    if record.image_index >= 0:
        info.index = record.image_index
    if record.ref:
        info.ref.CopyFrom(
            ref_pb2.MediaRef(
                session_id=record.session_id,
                entry_uuid=record.entry_name,
                index=record.image_index,
                pin=record.pin,
                declared_media_type=record.declared_media_type,
                approx_size_bytes=facts.size_bytes,
                uri=record.ref,
                line_offset_hint=record.byte_offset,
            )
        )
    return info
