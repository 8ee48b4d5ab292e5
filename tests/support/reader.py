"""A session that holds every element a reader meets, for the viewer's browser tests.

`reader_session` writes, under project `-home-dev-shop`, a Claude Code session whose first
prompt starts with an `<ide_opened_file>` note (so its title does too), then: a slash command
with arguments and ANSI-coloured output, assistant markdown (a heading, bold, a link, a Python
code fence), a hook line and a stop-hook summary, Edit / Write / TodoWrite / Bash (failing)
calls with their results in the next line, a Task call whose result names its sub-agent (whose
thread is written under `<session>/subagents/`), a tool result holding a word found nowhere
else (`WORD_IN_RESULT`), and a compaction (its boundary and its summary).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

PROJECT = "-home-dev-shop"
SESSION = "reader-session"
AGENT_ID = "a1b2c3d4"
SUBAGENT = f"agent-{AGENT_ID}"
TASK_CALL = "toolu_task_01"
WORD_IN_RESULT = "zanzibarwidget"
TITLE = "please fix the login bug"


@dataclass(frozen=True)
class ReaderSession:
    """Where the session and its sub-agent were written."""

    path: Path
    subagent_path: Path


def _line(fields: dict[str, Any]) -> bytes:
    return orjson.dumps(fields) + b"\n"


def _stamp(minute: int) -> str:
    return f"2026-03-04T09:{minute:02d}:00.000Z"


def user(uuid: str, minute: int, content: Any, **extra: Any) -> bytes:
    """A user line."""
    return _line(
        {
            "type": "user",
            "uuid": uuid,
            "sessionId": SESSION,
            "timestamp": _stamp(minute),
            "message": {"role": "user", "content": content},
            **extra,
        }
    )


def assistant(uuid: str, minute: int, content: list[dict[str, Any]], msg_id: str) -> bytes:
    """An assistant line with usage, so the header has tokens and a cost."""
    return _line(
        {
            "type": "assistant",
            "uuid": uuid,
            "sessionId": SESSION,
            "timestamp": _stamp(minute),
            "message": {
                "id": msg_id,
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": content,
                "usage": {"input_tokens": 1200, "output_tokens": 300},
            },
        }
    )


def system(uuid: str, minute: int, **fields: Any) -> bytes:
    """A system line."""
    return _line(
        {
            "type": "system",
            "uuid": uuid,
            "sessionId": SESSION,
            "timestamp": _stamp(minute),
            **fields,
        }
    )


def tool_use(call_id: str, name: str, **tool_input: Any) -> dict[str, Any]:
    """A tool_use block."""
    return {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}


def tool_result(call_id: str, text: str, *, error: bool = False) -> dict[str, Any]:
    """A tool_result block."""
    return {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": error}


MARKDOWN = (
    "## Plan\n\nI will make the **login check** strict, as the "
    "[docs](https://example.com/docs) say:\n\n"
    "```python\ndef check(user):\n    return user.active and not user.locked\n```\n\n"
    "- read the handler\n- fix the check\n"
)


def reader_session(root: Path) -> ReaderSession:
    """Write the session and its sub-agent under `root`; their paths."""
    lines = [
        user(
            "u-01",
            0,
            "<ide_opened_file>The user opened the file /src/app/login.py in the IDE. This may "
            f"or may not be related to the current task.</ide_opened_file>{TITLE}",
        ),
        user(
            "u-02",
            1,
            "<command-name>/model</command-name>\n<command-message>model</command-message>\n"
            "<command-args>opusplan</command-args>",
        ),
        user(
            "u-03",
            1,
            "<local-command-stdout>Set model to \x1b[1mopusplan\x1b[22m "
            "(\x1b[32mready\x1b[39m)</local-command-stdout>",
        ),
        assistant("a-01", 2, [{"type": "text", "text": MARKDOWN}], "msg_01"),
        assistant(
            "a-02",
            3,
            [
                tool_use(
                    "toolu_edit_01",
                    "Edit",
                    file_path="/src/app/login.py",
                    old_string="    return user.active\n",
                    new_string="    return user.active and not user.locked\n",
                )
            ],
            "msg_02",
        ),
        user(
            "u-04",
            3,
            [tool_result("toolu_edit_01", "The file /src/app/login.py has been updated.")],
        ),
        system(
            "s-01",
            3,
            content="Running \x1b[1mPostToolUse:Edit\x1b[22m...",
            level="info",
            toolUseID="toolu_edit_01",
        ),
        assistant(
            "a-03",
            4,
            [
                tool_use(
                    "toolu_write_01",
                    "Write",
                    file_path="/src/app/test_login.py",
                    content="def test_locked():\n    assert not check(locked_user)\n",
                )
            ],
            "msg_03",
        ),
        user("u-05", 4, [tool_result("toolu_write_01", "File created successfully")]),
        assistant(
            "a-04",
            5,
            [
                tool_use(
                    "toolu_todo_01",
                    "TodoWrite",
                    todos=[
                        {"content": "Read the handler", "status": "completed"},
                        {"content": "Fix the check", "status": "in_progress"},
                        {"content": "Run the tests", "status": "pending"},
                    ],
                )
            ],
            "msg_04",
        ),
        user("u-06", 5, [tool_result("toolu_todo_01", "Todos have been modified successfully")]),
        assistant(
            "a-05",
            6,
            [tool_use("toolu_bash_01", "Bash", command="uv run pytest -q", description="tests")],
            "msg_05",
        ),
        user(
            "u-07",
            6,
            [
                tool_result(
                    "toolu_bash_01",
                    f"\x1b[31mFAILED\x1b[0m test_login.py::test_locked - {WORD_IN_RESULT} missing",
                    error=True,
                )
            ],
        ),
        assistant(
            "a-06",
            7,
            [
                tool_use(
                    TASK_CALL,
                    "Task",
                    description="Find other login checks",
                    prompt="Search the code for other **login** checks.",
                    subagent_type="general-purpose",
                )
            ],
            "msg_06",
        ),
        user(
            "u-08",
            8,
            [tool_result(TASK_CALL, "Found one more check in /src/app/admin.py.")],
            toolUseResult={"agentId": AGENT_ID, "status": "completed"},
        ),
        system(
            "s-02",
            9,
            subtype="stop_hook_summary",
            hookCount=1,
            hookInfos=[{"command": "uv run pytest", "durationMs": 900}],
            hookErrors=[],
            preventedContinuation=False,
            level="suggestion",
        ),
        system(
            "s-03",
            10,
            subtype="compact_boundary",
            content="Conversation compacted",
            compactMetadata={"trigger": "auto", "preTokens": 50000},
        ),
        user(
            "u-09",
            10,
            "This session is being continued from a previous conversation. **Summary**: the "
            "login check was made strict.",
            isCompactSummary=True,
        ),
        assistant("a-07", 11, [{"type": "text", "text": "Done: the check is strict now."}], "m7"),
    ]
    project = root / PROJECT
    project.mkdir(parents=True, exist_ok=True)
    path = project / f"{SESSION}.jsonl"
    path.write_bytes(b"".join(lines))
    agent_dir = project / SESSION / "subagents"
    agent_dir.mkdir(parents=True, exist_ok=True)
    subagent_path = agent_dir / f"{SUBAGENT}.jsonl"
    subagent_path.write_bytes(
        _line(
            {
                "type": "user",
                "uuid": "sa-1",
                "sessionId": SESSION,
                "isSidechain": True,
                "agentId": AGENT_ID,
                "timestamp": _stamp(7),
                "message": {"role": "user", "content": "Search the code for other login checks."},
            }
        )
        + _line(
            {
                "type": "assistant",
                "uuid": "sa-2",
                "sessionId": SESSION,
                "isSidechain": True,
                "agentId": AGENT_ID,
                "timestamp": _stamp(8),
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "One more in `admin.py`."}],
                },
            }
        )
    )
    return ReaderSession(path, subagent_path)
