"""The shape the developers' guide asks of the code: no import cycle, modules and functions short.

An import cycle (a lazy import inside a function counts) ties two modules so
that neither can be read, tested or moved alone; the layers contract of
import-linter does not see one inside a layer. A module stays within 600
lines and a function within 80 (generated code aside) in the packages listed
in `SHORT`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("scrollback", "scrollback_app", "history_service", "media_service", "gateway", "client")
SHORT = ("history_service", "media_service", "scrollback")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_module_of_the_shipped_packages_imports_itself_back() -> None:
    graph = grimp.build_graph(*SHIPPED, include_external_packages=False)
    assert _cycles(graph) == []


def _sources() -> list[Path]:
    return sorted(
        path
        for package in SHORT
        for path in (ROOT / package).rglob("*.py")
        if not path.name.endswith(("_pb2.py", "_pb2_grpc.py"))
    )


@pytest.mark.parametrize("path", _sources(), ids=lambda path: str(path.relative_to(ROOT)))
def test_modules_and_functions_stay_short(path: Path) -> None:
    text = path.read_text()
    assert text.count("\n") <= MAX_MODULE_LINES
    long = [
        f"{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []
