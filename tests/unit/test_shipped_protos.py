"""The googleapis protos shipped beside Scrollback's for other languages' clients.

A client generated from `protos/` alone reads an error's reason from the google.rpc.Status
in its trailer, so `protos/google/rpc/status.proto` and `error_details.proto` ship there:
unchanged copies of the ones the installed googleapis-common-protos package carries (the
Python side's), and never generated again by tools/codegen.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("status.proto", "error_details.proto")


@pytest.mark.parametrize("name", SHIPPED)
def test_the_rich_error_protos_ship_beside_the_projects(name: str) -> None:
    spec = importlib.util.find_spec("google.rpc")
    assert spec is not None and spec.submodule_search_locations
    installed = Path(next(iter(spec.submodule_search_locations))) / name
    shipped = ROOT / "protos" / "google" / "rpc" / name
    assert shipped.read_bytes() == installed.read_bytes()


def test_codegen_leaves_the_googleapis_protos_to_their_package() -> None:
    spec = importlib.util.spec_from_file_location("codegen", ROOT / "tools" / "codegen.py")
    assert spec is not None and spec.loader is not None
    codegen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(codegen)
    files = [p.relative_to(ROOT / "protos").as_posix() for p in codegen._proto_files()]
    assert files and all(f.startswith("scrollback/") for f in files), files
    assert not (ROOT / "google" / "rpc" / "status_pb2.py").exists()
