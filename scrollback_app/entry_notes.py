"""What a Claude Code `system` line says, in one line, as the viewer's render.js says it:
hook runs ("Stop hook [uv run pytest] completed"), API errors, turn durations, compactions,
refusals, else the line's own `content` or its subtype."""

from __future__ import annotations

from typing import Any


def _stop_hooks(line: dict[str, Any]) -> str:
    infos = line.get("hookInfos")
    hooks = [
        str(info["command"])
        for info in (infos if isinstance(infos, list) else [])
        if isinstance(info, dict) and info.get("command")
    ]
    errors_value = line.get("hookErrors")
    errors = [str(e) for e in (errors_value if isinstance(errors_value, list) else [])]
    head = "Stop hook" + ("s" if len(hooks) > 1 else "")
    if hooks:
        head += " [" + ", ".join(hooks) + "]"
    if errors:
        return head + " failed: " + "; ".join(errors)
    return head + (" stopped the turn" if line.get("preventedContinuation") else " completed")


def _api_error(line: dict[str, Any]) -> str:
    error = line.get("error")
    if not isinstance(error, dict):
        error = {}
    text = "API error"
    if error.get("status"):
        text += f" {error['status']}"
    if isinstance(error.get("message"), str):
        text += f": {error['message']}"
    if line.get("retryAttempt"):
        text += f" (retry {line['retryAttempt']}/{line.get('maxRetries') or '?'})"
    return text


def system_note(line: dict[str, Any]) -> str:
    """One line saying what a `system` line is about (never empty)."""
    subtype = line.get("subtype") if isinstance(line.get("subtype"), str) else ""
    if subtype == "stop_hook_summary":
        return _stop_hooks(line)
    if subtype in ("api_error", "error"):
        return _api_error(line)
    if subtype == "compact_boundary":
        metadata = line.get("compactMetadata")
        before = metadata.get("preTokens") if isinstance(metadata, dict) else None
        return "Conversation compacted" + (
            f" ({int(before):,} tokens before)" if isinstance(before, int) else ""
        )
    duration = line.get("durationMs")
    if subtype == "turn_duration" and isinstance(duration, int | float) and duration:
        return f"turn took {round(duration / 1000)} s"
    if subtype == "api_refusal":
        return "refused: " + str(
            line.get("apiRefusalExplanation") or line.get("apiRefusalCategory") or ""
        )
    content = line.get("content")
    if isinstance(content, str) and content.strip():
        return content
    return subtype.replace("_", " ") if subtype else "system"
