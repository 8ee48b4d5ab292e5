"""The parsers of the client commands of `scrollback` (sessions, window, media, send, ...).

Every client command shares one group of connection flags (addresses, deadline, TLS), shown
apart from the command's own flags in its --help.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from scrollback.server.service_config import DEFAULT_STATE_TEXT


def add_client_commands(commands: Any) -> None:
    """Add the client commands (and `slim`, `images`) to the `scrollback` parser."""
    from scrollback_app import cli_client as cc
    from scrollback_app import cli_export, cli_sessions

    common = argparse.ArgumentParser(add_help=False)
    # Apart from each command's own flags in its --help: where the services are, and TLS.
    connection = common.add_argument_group(
        "connection", "where the services are and how to reach them (flags override variables)"
    )
    connection.add_argument(
        "--history-addr",
        default=os.environ.get("SCROLLBACK_HISTORY_ADDR") or "127.0.0.1:50051",
        help="history service HOST:PORT (SCROLLBACK_HISTORY_ADDR, default 127.0.0.1:50051)",
    )
    connection.add_argument(
        "--media-addr",
        default=os.environ.get("SCROLLBACK_MEDIA_ADDR") or "127.0.0.1:50052",
        help="media service HOST:PORT (SCROLLBACK_MEDIA_ADDR, default 127.0.0.1:50052)",
    )
    connection.add_argument(
        "--timeout",
        type=float,
        help="per-call deadline in seconds (default: the client library's per-call deadlines)",
    )
    common.add_argument("--json", action="store_true", help="print JSON for scripts")
    connection.add_argument(
        "--tls",
        action="store_true",
        default=None,
        help="speak TLS, trusting the system's roots (SCROLLBACK_TLS=1; default plaintext)",
    )
    connection.add_argument(
        "--tls-ca", metavar="PEM", help="trust this CA for TLS (SCROLLBACK_TLS_CA; implies --tls)"
    )
    connection.add_argument(
        "--tls-cert",
        metavar="PEM",
        help="client certificate for mutual TLS, with --tls-key (SCROLLBACK_TLS_CLIENT_CERT)",
    )
    connection.add_argument(
        "--tls-key", metavar="PEM", help="the client certificate's key (SCROLLBACK_TLS_CLIENT_KEY)"
    )
    connection.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="the name the server certificate must carry, if not the host "
        "(SCROLLBACK_TLS_SERVER_NAME)",
    )

    sessions = commands.add_parser("sessions", parents=[common], help="list sessions")
    sessions.add_argument("--project", help="only this project directory")
    sessions.add_argument("--limit", type=int, default=0, help="at most this many (0: all)")
    sessions.set_defaults(handler=cli_sessions.cmd_sessions)

    for name in ("session", "info"):
        session = commands.add_parser(
            name, parents=[common], help="one session's totals: entries, tokens, estimated cost"
        )
        session.add_argument("session")
        session.set_defaults(handler=cli_sessions.cmd_session)

    window = commands.add_parser("window", parents=[common], help="print one page of a session")
    window.add_argument("session")
    direction = window.add_mutually_exclusive_group()
    direction.add_argument(
        "--older", metavar="TOKEN", help="the next (older) page: the token printed before"
    )
    direction.add_argument(
        "--newer",
        metavar="TOKEN",
        help="the next (newer) page of an --oldest-first listing: the token printed before",
    )
    direction.add_argument(
        "--oldest-first", action="store_true", help="start from the beginning of the session"
    )
    window.add_argument("--page-size", type=int, help="entries per page (default and at most 200)")
    window.set_defaults(handler=cc.cmd_window)

    search = commands.add_parser(
        "search",
        parents=[common],
        help='search every session: words, "phrases", prefix*',
    )
    search.add_argument("query", help='words (all must match), "a phrase", or a prefix*')
    search.add_argument("--project", help="only this project directory")
    search.add_argument("--session", help="only this session")
    search.add_argument(
        "--type", action="append", help="only entries of this type (repeatable: user, ...)"
    )
    search.add_argument("--role", action="append", help="only this message role (repeatable)")
    search.add_argument("--since", metavar="ISO", help="only entries at or after this time")
    search.add_argument("--until", metavar="ISO", help="only entries before this time")
    search.add_argument(
        "--photos", choices=["with", "without"], help="only entries with (or without) photos"
    )
    search.add_argument(
        "--newest",
        action="store_true",
        help="newest first (default: most relevant first)",
    )
    search.add_argument("--limit", type=int, default=20, help="hits per page (at most 100)")
    search.add_argument("--page-token", metavar="TOKEN", help="the next page: the token printed")
    search.set_defaults(handler=cc.cmd_search)

    media = commands.add_parser("media", parents=[common], help="fetch one photo")
    media.add_argument("ref", help="<session>/<uuid>/<index> (with --pin) or media:<sha256>")
    media.add_argument("--pin", help="the pin of a transcript image reference")
    media.add_argument("-o", "--output", required=True, help="output file ('-': stdout)")
    media.add_argument(
        "--size",
        type=int,
        choices=(96, 320, 960),
        help="a WebP thumbnail of at most SIZE pixels on its longest side, not the original",
    )
    media.set_defaults(handler=cc.cmd_media)

    send = commands.add_parser("send", parents=[common], help="send a message")
    send.add_argument(
        "session", nargs="?", help="an existing session's id (for a new chat: --chat-key)"
    )
    send.add_argument("text", help="the message text")
    send.add_argument("--chat-key", help="a client-chosen key for a new chat with no session yet")
    send.add_argument(
        "--image",
        action="append",
        metavar="PATH",
        help="attach an image: PNG, JPEG, GIF, WebP, AVIF or HEIC, by its bytes (repeatable)",
    )
    send.add_argument(
        "--file",
        action="append",
        metavar="PATH",
        help="attach any file as a plain attachment, not shown inline (repeatable)",
    )
    send.set_defaults(handler=cc.cmd_send)

    tail = commands.add_parser("tail", parents=[common], help="follow a session live")
    tail.add_argument("session")
    tail.add_argument("--last", type=int, default=10, help="entries to print first (default 10)")
    tail.set_defaults(handler=cc.cmd_tail)

    gc = commands.add_parser("gc", help="collect unreferenced blobs in the local state dir")
    gc.add_argument(
        "--state", help=f"state directory (SCROLLBACK_STATE, default {DEFAULT_STATE_TEXT})"
    )
    gc.add_argument(
        "--grace",
        type=float,
        default=3600.0,
        help="keep blobs younger than this, in seconds (default 3600)",
    )
    gc.add_argument("--json", action="store_true", help="print JSON for scripts")
    gc.set_defaults(handler=cc.cmd_gc)

    export = commands.add_parser("export", parents=[common], help="export a session as HTML")
    export.add_argument("session")
    export.add_argument("--html", required=True, metavar="DIR", help="output directory")
    export.set_defaults(handler=cli_export.cmd_export)

    from scrollback_app import cli_rescue

    cli_rescue.add_commands(commands, common)
