"""Every library the shipped packages import is a runtime dependency (pyproject.toml).

The README's commands (`scrollback bench`, `up`, the services, the gateway)
must run on a plain `pip install scrollback`, without the dev extras, so a
module of the shipped packages may import only the standard library, the
project's own packages and `[project] dependencies`; imports that only type
checking sees are exempt.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("scrollback", "scrollback_app", "history_service", "media_service", "gateway", "client")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _runtime_dependencies() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = (re.match(r"[A-Za-z0-9._-]+", spec) for spec in project["dependencies"])
    return {_canonical(name.group(0)) for name in names if name}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(tree: ast.AST) -> set[str]:
    """Top-level names of the modules imported anywhere in `tree`, but under TYPE_CHECKING."""
    found: set[str] = set()
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            found |= set().union(*(_imported(child) for child in node.orelse))
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        found |= _imported(node)
    return found


def test_the_shipped_packages_import_only_runtime_dependencies() -> None:
    dependencies = _runtime_dependencies()
    providers = packages_distributions()
    missing: dict[str, set[str]] = {}
    for package in SHIPPED:
        for path in sorted((ROOT / package).rglob("*.py")):
            for module in _imported(ast.parse(path.read_bytes(), str(path))):
                if module in sys.stdlib_module_names or module in SHIPPED:
                    continue
                distributions = {_canonical(d) for d in providers.get(module, [module])}
                if not distributions & dependencies:
                    where = str(path.relative_to(ROOT))
                    missing.setdefault(module, set()).add(where)
    assert missing == {}, f"imported but not a runtime dependency: {missing}"
