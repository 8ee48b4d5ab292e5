"""The gateway over HTTP (httpx): JSON shapes, photo headers, 304, ranges, signatures, statuses, SSE."""

from __future__ import annotations

import hashlib
import io
import threading
import time
from typing import Any

import httpx
import orjson
import pytest
from PIL import Image

from gateway.config import ConfigError
from gateway.signing import UrlSigner
from tests.support.gateway import SESSION, TOKENS, GatewayStack, photo_session
from tests.support.servers import png, user_line

CACHE = "private, max-age=31536000, immutable"


def _first_ref(stack: GatewayStack, **headers: str) -> dict[str, Any]:
    window = httpx.get(
        f"{stack.url}/api/v1/sessions/{SESSION}/window?page_size=20", headers=headers
    )
    assert window.status_code == 200, window.text
    return next(ref for e in window.json()["entries"] for ref in e["mediaRefs"])


def _bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[name]}"}


def test_sessions_and_windows_page_with_signed_photo_urls(stack: GatewayStack) -> None:
    photo_session(stack, entries=60, photos=10)
    stack.start_gateway()
    sessions = httpx.get(f"{stack.url}/api/v1/sessions?page_size=10").json()
    assert [s["sessionId"] for s in sessions["sessions"]] == [SESSION]
    seen: list[str] = []
    token = ""
    while True:
        body = httpx.get(
            f"{stack.url}/api/v1/sessions/{SESSION}/window",
            params={"page_size": 25, "page_token": token},
        ).json()
        seen = [e["uuid"] for e in body["entries"]] + seen
        for entry in body["entries"]:
            assert orjson.loads(entry["json"])["uuid"] == entry["uuid"]
            for ref in entry["mediaRefs"]:
                assert ref["url"].startswith(f"/api/v1/media/{ref['uri']}?pin={ref['pin']}&")
        token = body["nextPageToken"]
        if not token:
            break
    assert seen == [f"e{n:04d}" for n in range(60)]
    oldest = httpx.get(
        f"{stack.url}/api/v1/sessions/{SESSION}/window?direction=oldest_first&page_size=5"
    ).json()
    assert [e["uuid"] for e in oldest["entries"]] == [f"e{n:04d}" for n in range(5)]


def test_photo_headers_bytes_304_and_ranges(stack: GatewayStack) -> None:
    uuids = photo_session(stack, entries=20, photos=2)
    stack.start_gateway()
    ref = _first_ref(stack)
    url = stack.url + ref["url"]
    whole = httpx.get(url)
    assert whole.status_code == 200
    digest = hashlib.sha256(whole.content).hexdigest()
    assert whole.content == png(uuids.index(ref["uri"].split("/")[1]) + 1, 110)
    assert whole.headers["content-type"] == "image/png"
    assert whole.headers["etag"] == f'"{digest}"'
    assert whole.headers["cache-control"] == CACHE
    assert whole.headers["x-content-type-options"] == "nosniff"
    assert whole.headers["content-security-policy"] == "sandbox; default-src 'none'"
    assert "content-disposition" not in whole.headers
    size = len(whole.content)

    assert httpx.get(url, headers={"If-None-Match": f'"{digest}"'}).status_code == 304
    assert httpx.get(url, headers={"If-None-Match": '"other"'}).status_code == 200
    for header, first, last in (
        ("bytes=0-99", 0, 99),
        ("bytes=100-", 100, size - 1),
        ("bytes=-50", size - 50, size - 1),
        (f"bytes=10-{size + 500}", 10, size - 1),
    ):
        part = httpx.get(url, headers={"Range": header})
        assert part.status_code == 206, header
        assert part.headers["content-range"] == f"bytes {first}-{last}/{size}"
        assert part.content == whole.content[first : last + 1]
    for header in (f"bytes={size}-", f"bytes={size + 10}-{size + 20}"):
        refused = httpx.get(url, headers={"Range": header})
        assert refused.status_code == 416
        assert refused.headers["content-range"] == f"bytes */{size}"


def test_unsafe_bytes_are_an_attachment(stack: GatewayStack) -> None:
    html = b"<html><script>alert(1)</script></html>" * 2000
    stack.pair.transcript(SESSION).write_bytes(user_line("u1", "not a photo", images=(html,)))
    stack.start_gateway()
    ref = _first_ref(stack)
    answer = httpx.get(stack.url + ref["url"])
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/octet-stream"
    assert answer.headers["content-disposition"] == "attachment"
    assert answer.content == html


def test_signatures_tampered_expired_missing_are_refused(stack: GatewayStack) -> None:
    photo_session(stack, entries=20, photos=2)
    config = stack.start_gateway()
    ref = _first_ref(stack)
    url = stack.url + ref["url"]
    assert httpx.get(url).status_code == 200
    base, _, query = url.partition("?")
    fields = dict(item.split("=", 1) for item in query.split("&"))
    signature = fields["sig"]
    tampered = [
        {**fields, "sig": ("0" if signature[0] != "0" else "1") + signature[1:]},
        {**fields, "exp": str(int(fields["exp"]) + 60)},
        {**fields, "p": "mallory"},
        {k: v for k, v in fields.items() if k != "sig"},
    ]
    for changed in tampered:
        answer = httpx.get(base, params=changed)
        assert answer.status_code == 403, changed
        assert signature not in answer.text
    other = httpx.get(
        base.replace("/0", "/1").replace(ref["uri"], ref["uri"][:-1] + "1"), params=fields
    )
    assert other.status_code == 403

    # Signed with the gateway's key an hour ago for a 60 s lifetime: expired.
    past = UrlSigner(config.signing_key(), 60, clock=lambda: time.time() - 3600)
    expires, old_signature = past.sign(ref["uri"], ref["pin"], "")
    stale = httpx.get(
        base, params={"pin": ref["pin"], "p": "", "exp": expires, "sig": old_signature}
    )
    assert stale.status_code == 403


def test_auth_bearer_passthrough_and_other_principal(stack: GatewayStack) -> None:
    photo_session(stack, entries=20, photos=2)
    stack.start_gateway(auth=True)
    root = str(stack.pair.root)
    unauthenticated = httpx.get(f"{stack.url}/api/v1/sessions")
    assert unauthenticated.status_code == 401
    assert unauthenticated.headers["www-authenticate"] == "Bearer"
    wrong = httpx.get(f"{stack.url}/api/v1/sessions", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and "nope" not in wrong.text and root not in wrong.text
    ref = _first_ref(stack, **_bearer("alice"))
    assert "p=alice" in ref["url"]
    url = stack.url + ref["url"]
    assert httpx.get(url).status_code == 200  # an <img>: no header, the signature maps to alice
    assert httpx.get(url, headers=_bearer("alice")).status_code == 200
    assert httpx.get(url, headers=_bearer("bob")).status_code == 403
    bare = url.partition("?")[0] + f"?pin={ref['pin']}"
    assert httpx.get(bare).status_code == 403
    assert httpx.get(bare, headers=_bearer("bob")).status_code == 200  # pass-through


def test_grpc_statuses_map_to_http_without_internals(stack: GatewayStack) -> None:
    photo_session(stack, entries=20, photos=2)
    stack.start_gateway()
    root = str(stack.pair.root)
    ref = _first_ref(stack)
    api = f"{stack.url}/api/v1/sessions"
    cases = [
        (f"{api}/no-such-session/window", 404, "NOT_FOUND"),
        (f"{api}/bad.id!/window", 400, "INVALID_ARGUMENT"),
        (f"{api}/{SESSION}/window?page_token=garbage", 400, "INVALID_ARGUMENT"),
        (f"{api}/{SESSION}/window?page_size=-1", 400, "INVALID_ARGUMENT"),
        (f"{api}/{SESSION}/window?direction=sideways", 400, "INVALID_ARGUMENT"),
        (f"{stack.url}/api/v1/media/not-a-ref?pin=x", 400, "INVALID_ARGUMENT"),
    ]
    for url, status, code in cases:
        answer = httpx.get(url)
        assert answer.status_code == status, url
        assert answer.json()["error"]["code"] == code
        assert root not in answer.text and "/" not in answer.json()["error"]["message"]

    # A pin that no longer matches (the transcript was rewritten): 409, not the bytes.
    transcript = stack.pair.transcript(SESSION)
    lines = transcript.read_bytes().splitlines(keepends=True)
    number = int(ref["uri"].split("/")[1][1:])
    lines[number] = user_line(f"e{number:04d}", "rewritten", images=(png(999, 110),))
    transcript.write_bytes(b"".join(lines))
    stale = httpx.get(stack.url + ref["url"])
    assert stale.status_code == 409
    assert stale.json()["error"]["code"] == "FAILED_PRECONDITION"
    assert root not in stale.text


def _read_events(response: httpx.Response, want: int, out: list[dict[str, Any]]) -> None:
    event: dict[str, Any] = {}
    for line in response.iter_lines():
        if not line:
            if event.get("event") in ("entry", "accepted"):
                out.append(event)
                if len(out) >= want:
                    return
            event = {}
            continue
        field, _, value = line.partition(": ")
        event[field] = value


def test_events_stream_entries_and_accepts_and_resume_from_last_event_id(
    stack: GatewayStack,
) -> None:
    photo_session(stack, entries=10, photos=1)
    stack.start_gateway()
    boot = httpx.get(f"{stack.url}/api/v1/sessions/{SESSION}/bootstrap?page_size=5").json()
    assert len(boot["entries"]) == 5 and boot["watchPosition"]
    events: list[dict[str, Any]] = []
    url = f"{stack.url}/api/v1/sessions/{SESSION}/events"
    with httpx.stream(
        "GET", url, params={"position": boot["watchPosition"]}, timeout=20
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        reader = threading.Thread(target=_read_events, args=(response, 2, events))
        reader.start()
        # The events start at the bootstrap's position: what is added from now on is among
        # them however soon it comes, so nothing waits for the stream to be read.
        with stack.pair.transcript(SESSION).open("ab") as transcript:
            transcript.write(user_line("live1", "appended line"))
        sent = httpx.post(
            f"{stack.url}/api/v1/sessions/{SESSION}/messages",
            json={"client_txn_id": "txn-1", "text": "hello from http"},
        )
        assert sent.status_code == 200, sent.text
        reader.join(15)
    assert [e["event"] for e in sorted(events, key=lambda e: e["event"])] == [
        "accepted",
        "entry",
    ]
    by_kind = {e["event"]: e for e in events}
    assert orjson.loads(by_kind["entry"]["data"])["uuid"] == "live1"
    assert orjson.loads(by_kind["accepted"]["data"])["text"] == "hello from http"

    # Resuming from the first event's id yields the second only: no gap, no duplicate.
    resumed: list[dict[str, Any]] = []
    with httpx.stream(
        "GET", url, headers={"Last-Event-ID": events[0]["id"]}, timeout=20
    ) as response:
        reader = threading.Thread(target=_read_events, args=(response, 1, resumed))
        reader.start()
        reader.join(15)
    assert [e["data"] for e in resumed] == [events[1]["data"]]

    not_json = httpx.post(
        f"{stack.url}/api/v1/sessions/{SESSION}/messages",
        content=b"text=x",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert not_json.status_code == 415


def test_search_finds_and_opens_the_window_at_the_hit(stack: GatewayStack) -> None:
    photo_session(stack, entries=60, photos=10)
    stack.start_gateway()
    deadline = time.monotonic() + 15
    while True:
        body = httpx.get(
            f"{stack.url}/api/v1/search", params={"q": "question", "page_size": 5}
        ).json()
        if len(body["hits"]) == 5 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(body["hits"]) == 5 and body["nextPageToken"]
    hit = body["hits"][0]
    first = hit["snippet"]["highlights"][0]
    assert hit["snippet"]["text"][first["start"] : first["end"]] == "question"
    assert hit["sessionId"] == SESSION and isinstance(hit["byteOffset"], str)
    photos = httpx.get(f"{stack.url}/api/v1/search", params={"q": "photo", "photos": "with"})
    assert len(photos.json()["hits"]) == 10
    window = httpx.get(
        f"{stack.url}/api/v1/sessions/{SESSION}/window",
        params={"page_token": hit["windowPageToken"], "page_size": 3},
    ).json()
    assert window["entries"][-1]["uuid"] == hit["entryUuid"]
    # Newest first on request (the default is most relevant first), and the build is done.
    newest = httpx.get(
        f"{stack.url}/api/v1/search", params={"q": "question", "order": "newest"}
    ).json()
    stamps = [h["timestamp"] for h in newest["hits"]]
    assert len(stamps) == 20 and stamps == sorted(stamps, reverse=True)
    assert newest.get("partial", False) is False
    for params in (
        {"q": ""},
        {"q": "x", "since": "soon"},
        {"q": "x", "photos": "maybe"},
        {"q": "x", "order": "oldest"},
    ):
        answer = httpx.get(f"{stack.url}/api/v1/search", params=params)
        assert answer.status_code == 400
        assert answer.json()["error"]["code"] == "INVALID_ARGUMENT"


def _webp_size(data: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "WEBP"
        return image.size


def test_photo_thumbnails_by_size_under_the_same_signature(stack: GatewayStack) -> None:
    uuids = photo_session(stack, entries=20, photos=2)
    stack.start_gateway(auth=True)
    ref = _first_ref(stack, **_bearer("alice"))
    url = stack.url + ref["url"]
    original = httpx.get(url).content
    assert original == png(uuids.index(ref["uri"].split("/")[1]) + 1, 110)
    etags = set()
    # The signature covers ref, pin, principal and expiry; the size rides beside it.
    for size, side in (("96", 96), ("320", 110), ("960", 110)):  # never upscaled
        thumb = httpx.get(url + f"&size={size}")
        assert thumb.status_code == 200, (size, thumb.text)
        assert thumb.headers["content-type"] == "image/webp"
        assert thumb.headers["cache-control"] == CACHE
        assert thumb.headers["content-security-policy"] == "sandbox; default-src 'none'"
        assert _webp_size(thumb.content) == (side, side)
        digest = hashlib.sha256(thumb.content).hexdigest()
        assert thumb.headers["etag"] == f'"{digest}"'
        assert int(thumb.headers["content-length"]) == len(thumb.content)
        etags.add(digest)
        assert (
            httpx.get(url + f"&size={size}", headers={"If-None-Match": f'"{digest}"'}).status_code
            == 304
        )
        # A suffix range is sized from StatMedia at the same size.
        tail = httpx.get(url + f"&size={size}", headers={"Range": "bytes=-20"})
        assert tail.status_code == 206 and tail.content == thumb.content[-20:]
        assert tail.headers["content-range"].endswith(f"/{len(thumb.content)}")
    assert hashlib.sha256(original).hexdigest() not in etags
    # Any other size is 400, before the signature is looked at.
    for bad in ("100", "", "abc", "320px", "0", "-96"):
        answer = httpx.get(url + f"&size={bad}")
        assert answer.status_code == 400, bad
        assert answer.json()["error"]["code"] == "INVALID_ARGUMENT"
    # The size does not widen the grant: a tampered URL is refused at every size.
    base, _, query = url.partition("?")
    fields = dict(item.split("=", 1) for item in query.split("&"))
    for changed in ({**fields, "p": "bob"}, {k: v for k, v in fields.items() if k != "sig"}):
        assert httpx.get(base, params={**changed, "size": "320"}).status_code == 403
    assert httpx.get(url + "&size=320", headers=_bearer("bob")).status_code == 403


def test_a_thumbnail_of_bytes_that_are_no_image_is_a_conflict(stack: GatewayStack) -> None:
    html = b"<html><script>alert(1)</script></html>" * 2000
    stack.pair.transcript(SESSION).write_bytes(user_line("u1", "not a photo", images=(html,)))
    stack.start_gateway()
    ref = _first_ref(stack)
    answer = httpx.get(stack.url + ref["url"] + "&size=96")
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "FAILED_PRECONDITION"
    assert "script" not in answer.text


def _usage_line(uuid: str, message_id: str, output: int, model: str) -> bytes:
    return (
        orjson.dumps(
            {
                "type": "assistant",
                "uuid": uuid,
                "timestamp": f"2026-01-0{1 + len(uuid) % 2}T10:00:00Z",
                "message": {
                    "id": message_id,
                    "role": "assistant",
                    "model": model,
                    "content": [{"type": "text", "text": "hi"}],
                    "usage": {"input_tokens": 100, "output_tokens": output},
                },
            }
        )
        + b"\n"
    )


def test_get_session_returns_the_insight(stack: GatewayStack) -> None:
    lines = [
        user_line(
            "u1", "look", images=(png(1, 110), png(2, 110)), timestamp="2026-01-01T09:00:00Z"
        ),
        # One message written as two lines: counted once, with its final output count.
        _usage_line("a1", "msg_1", 5, "claude-sonnet-4-5"),
        _usage_line("a22", "msg_1", 40, "claude-sonnet-4-5"),
        _usage_line("a3", "msg_2", 10, "claude-sonnet-4-5"),
    ]
    stack.pair.transcript(SESSION).write_bytes(b"".join(lines))
    stack.start_gateway(auth=True)
    answer = httpx.get(f"{stack.url}/api/v1/sessions/{SESSION}", headers=_bearer("alice"))
    assert answer.status_code == 200, answer.text
    assert answer.headers["cache-control"] == "no-store"
    body = answer.json()
    # The canonical mapping: lowerCamelCase, uint64 as strings, unset messages left out.
    assert body["sessionId"] == SESSION and body["subagentCount"] == 0
    assert body["isSubagent"] is False and body["parentToolUseId"] == ""
    insight = body["insight"]
    assert insight["entryCounts"] == [
        {"type": "assistant", "count": "3"},
        {"type": "user", "count": "1"},
    ]
    assert insight["photoCount"] == "2"
    assert insight["usage"]["inputTokens"] == "200" and insight["usage"]["outputTokens"] == "50"
    (model,) = insight["models"]
    assert model["model"] == "claude-sonnet-4-5" and model["messages"] == "2"
    assert model["costKnown"] and insight["costComplete"] and insight["costUsd"] > 0
    assert insight["firstTime"].startswith("2026-01-01T09:00:00")
    assert "subagentInsight" not in body
    for url, headers, status in (
        (f"{stack.url}/api/v1/sessions/{SESSION}", {}, 401),
        (f"{stack.url}/api/v1/sessions/no-such-session", _bearer("alice"), 404),
        (f"{stack.url}/api/v1/sessions/bad.id!", _bearer("alice"), 400),
    ):
        assert httpx.get(url, headers=headers).status_code == status, url


def test_numbers_past_int64_and_int32_are_416_and_400_on_a_live_connection(
    stack: GatewayStack,
) -> None:
    photo_session(stack, entries=20, photos=2)
    stack.start_gateway()
    ref = _first_ref(stack)
    url = stack.url + ref["url"]
    window = f"{stack.url}/api/v1/sessions/{SESSION}/window"
    huge = "9" * 5000
    with httpx.Client() as client:
        size = len(client.get(url).content)
        ports = set()
        for header in (
            "bytes=0-18446744073709551616",
            "bytes=9223372036854775808-",
            "bytes=-9223372036854775808",
            f"bytes={huge}-",
            f"bytes=0-{huge}",
            f"bytes=0000000000000000000000000{huge}-",
        ):
            answer = client.get(url, headers={"Range": header})
            assert answer.status_code == 416, header[:40]
            assert answer.headers["content-range"] == f"bytes */{size}"
            ports.add(_local_port(answer))
        # The largest int64 position is a valid one, past this photo's end.
        assert client.get(url, headers={"Range": "bytes=9223372036854775807-"}).status_code == 416
        for value in ("2147483648", "-2147483649", "18446744073709551616", huge):
            for where in (window, f"{stack.url}/api/v1/sessions", f"{stack.url}/api/v1/search"):
                answer = client.get(where, params={"page_size": value, "q": "photo"})
                assert answer.status_code == 400, (where, value[:20])
                assert answer.json()["error"]["code"] == "INVALID_ARGUMENT"
                ports.add(_local_port(answer))
        for moment in ("9999-12-31T23:59:59-23:00", "0001-01-01T00:00:00+23:00"):
            answer = client.get(f"{stack.url}/api/v1/search", params={"q": "x", "since": moment})
            assert answer.status_code == 400, moment
            ports.add(_local_port(answer))
        # A non-ASCII digit in the expiry is a bad signature, not a crash.
        base, _, query = url.partition("?")
        fields = dict(item.split("=", 1) for item in query.split("&"))
        assert client.get(base, params={**fields, "exp": "\u00b2"}).status_code == 403
        ports.add(_local_port(client.get(url, headers={"Range": "bytes=0-9"})))
    # One keep-alive connection served them all: none was reset by an uncaught error.
    assert len(ports) == 1


def _local_port(answer: httpx.Response) -> int:
    stream = answer.extensions["network_stream"]
    return int(stream.get_extra_info("client_addr")[1])


def test_only_loopback_names_and_the_listen_host_are_answered_without_auth(
    stack: GatewayStack,
) -> None:
    photo_session(stack, entries=20, photos=2)
    stack.start_gateway()
    ref = _first_ref(stack)
    assert stack.gateway is not None
    port = stack.gateway.port
    urls = [
        f"{stack.url}/",
        f"{stack.url}/sessions/{SESSION}",
        f"{stack.url}/static/viewer.js",
        f"{stack.url}/api/v1/sessions",
        f"{stack.url}/api/v1/sessions/{SESSION}/window",
        stack.url + ref["url"],
    ]
    for host in (
        "localhost",
        f"localhost:{port}",
        "127.0.0.1",
        f"[::1]:{port}",
        "[::1]",
        "LocalHost:1",
    ):
        for url in urls:
            assert httpx.get(url, headers={"Host": host}).status_code == 200, (host, url)
    # A DNS-rebinding page names its own host: it reads nothing and sends nothing.
    for host in (
        "evil.example",
        f"evil.example:{port}",
        "127.0.0.1.evil.example",
        "localhost.",
        "[::2]",
        "::1",
        "",
        "localhost:port",
    ):
        for url in urls:
            answer = httpx.get(url, headers={"Host": host})
            assert answer.status_code == 421, (host, url)
            assert answer.json()["error"]["code"] == "MISDIRECTED_REQUEST"
        sent = httpx.post(
            f"{stack.url}/api/v1/sessions/{SESSION}/messages",
            json={"client_txn_id": f"txn-{host}", "text": "from a rebinding page"},
            headers={"Host": host},
        )
        assert sent.status_code == 421, host
    boot = httpx.get(f"{stack.url}/api/v1/sessions/{SESSION}/bootstrap").json()
    assert boot["pending"] == []


def test_with_auth_the_allow_list_names_the_hosts(stack: GatewayStack) -> None:
    photo_session(stack, entries=20, photos=2)
    stack.start_gateway(auth=True, allowed_hosts="Viewer.Example, 192.0.2.7,[2001:db8::1]")
    sessions = f"{stack.url}/api/v1/sessions"
    for host in (
        "viewer.example",
        "viewer.example:443",
        "192.0.2.7:8080",
        "[2001:db8::1]:80",
        "localhost",
    ):
        assert httpx.get(sessions, headers={"Host": host, **_bearer("alice")}).status_code == 200
        assert httpx.get(sessions, headers={"Host": host}).status_code == 401
    for host in ("evil.example", "viewer.example.evil.example", "192.0.2.8"):
        answer = httpx.get(sessions, headers={"Host": host, **_bearer("alice")})
        assert answer.status_code == 421, host
        assert TOKENS["alice"] not in answer.text


def test_the_host_allow_list_is_checked_at_start(stack: GatewayStack) -> None:
    with pytest.raises(ConfigError, match="only with auth"):
        stack.start_gateway(allowed_hosts="*")
    for bad in ("http://viewer.example", "viewer.example:8080", "viewer.example/x", "*.example"):
        with pytest.raises(ConfigError, match="host names"):
            stack.start_gateway(allowed_hosts=bad)
    stack.start_gateway(auth=True, allowed_hosts="*")
    answer = httpx.get(
        f"{stack.url}/api/v1/sessions", headers={"Host": "anything.example", **_bearer("bob")}
    )
    assert answer.status_code == 200


def test_error_bodies_name_the_reason_the_service_sent(stack: GatewayStack) -> None:
    photo_session(stack, entries=40, photos=2)
    stack.start_gateway()
    missing = httpx.get(f"{stack.url}/api/v1/sessions/nope/window")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "NOT_FOUND"
    assert missing.json()["error"]["reason"] == "SESSION_NOT_FOUND"
    token = httpx.get(
        f"{stack.url}/api/v1/sessions/{SESSION}/window", params={"page_size": 10}
    ).json()["nextPageToken"]
    path = stack.pair.transcript(SESSION)
    path.write_bytes(path.read_bytes().replace(b"question", b"QUESTION"))
    stale = httpx.get(f"{stack.url}/api/v1/sessions/{SESSION}/window", params={"page_token": token})
    assert stale.status_code == 409
    error = stale.json()["error"]
    assert (error["code"], error["reason"]) == ("FAILED_PRECONDITION", "TRANSCRIPT_REWRITTEN")
    assert "latest window" in error["message"]
    # The gateway's own refusals have no service reason.
    bad = httpx.get(f"{stack.url}/api/v1/sessions/{SESSION}/window?page_size=x")
    assert bad.status_code == 400 and "reason" not in bad.json()["error"]


def test_the_api_answers_the_canonical_json_mapping_plus_signed_urls(stack: GatewayStack) -> None:
    """Sessions, insight, window entries and search hits are exactly message_json of what the
    services answer; the gateway adds only a signed `url` beside each media ref."""
    from client import HistoryClient
    from scrollback.contract.proto_json import message_json

    photo_session(stack, entries=30, photos=3)
    stack.start_gateway()
    api = f"{stack.url}/api/v1"
    deadline = time.monotonic() + 15
    while True:
        hits = httpx.get(f"{api}/search", params={"q": "question", "page_size": 4}).json()
        if len(hits["hits"]) == 4 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    with HistoryClient(stack.pair.history_addr) as history:
        listed = history.list_sessions(page_size=10)
        session = history.get_session(SESSION)
        window = history.read_window(SESSION, page_size=30)
        found = history.search("question", page_size=4)
    assert httpx.get(f"{api}/sessions?page_size=10").json() == message_json(listed)
    assert httpx.get(f"{api}/sessions/{SESSION}").json() == message_json(session)
    # Each search's token holds the time of its first page: equal tokens only for one search.
    assert hits == {
        "hits": [message_json(hit) for hit in found.hits],
        "nextPageToken": hits["nextPageToken"],
        "partial": found.partial,
    }
    assert hits["nextPageToken"] and found.next_page_token
    with HistoryClient(stack.pair.history_addr) as history:
        after = history.search("question", page_size=4, page_token=found.next_page_token)
    more = httpx.get(
        f"{api}/search",
        params={"q": "question", "page_size": 4, "page_token": hits["nextPageToken"]},
    ).json()
    assert more["hits"] == [message_json(hit) for hit in after.hits]
    body = httpx.get(f"{api}/sessions/{SESSION}/window?page_size=30").json()
    assert body["nextPageToken"] == "" and body["fileSizeBytes"] == str(window.file_size_bytes)
    assert len(body["entries"]) == 30
    for got, entry in zip(body["entries"], window.entries, strict=True):
        urls = [ref.pop("url") for ref in got["mediaRefs"]]
        assert got == message_json(entry)
        assert [url.partition("?")[0] for url in urls] == [
            f"/api/v1/media/{ref.uri}" for ref in entry.media_refs
        ]
    assert sum(len(e["mediaRefs"]) for e in body["entries"]) == 3
