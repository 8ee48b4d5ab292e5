"""Generate the Python code and typed stubs for every proto under protos/.

One entry point for code generation: `python tools/codegen.py` writes
`*_pb2.py`, `*_pb2.pyi`, `*_pb2_grpc.py` and `*_pb2_grpc.pyi` next to the
package directories of `scrollback/`; `--check` generates into a temporary
directory and fails when the committed files differ, so CI catches protos and
generated code that disagree.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "protos"
OUT_ROOT = REPO
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


# googleapis protos shipped for other languages' clients: their Python code is the
# googleapis-common-protos package's.
THIRD_PARTY = PROTO_ROOT / "google"


def _proto_files() -> list[Path]:
    return sorted(p for p in PROTO_ROOT.rglob("*.proto") if not p.is_relative_to(THIRD_PARTY))


def _plugin(name: str) -> str:
    scripts = Path(sysconfig.get_path("scripts"))
    candidate = scripts / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"codegen: plugin {name} not found; install the dev extras")
    return found


def generate(out_dir: Path) -> None:
    """Run protoc (from grpcio-tools) with the grpc and mypy-protobuf plugins."""
    import grpc_tools
    from grpc_tools import protoc  # imported here: a dev-only dependency

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--mypy_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        *(str(p.relative_to(PROTO_ROOT)) for p in _proto_files()),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("codegen: protoc failed")
    # Each generated package directory needs an __init__.py to be importable
    # as a regular package (and to be found by setuptools).
    for proto in _proto_files():
        package_dir = out_dir / proto.parent.relative_to(PROTO_ROOT)
        for directory in [package_dir, *package_dir.parents]:
            if directory == out_dir or out_dir not in directory.parents:
                break
            init = directory / "__init__.py"
            if not init.exists():
                init.write_text('"""Generated protobuf package."""\n')


def _generated_files(root: Path) -> set[Path]:
    found: set[Path] = set()
    for proto in _proto_files():
        package_dir = proto.parent.relative_to(PROTO_ROOT)
        for suffix in GENERATED_SUFFIXES:
            found.add(package_dir / f"{proto.stem}{suffix}")
    return {p for p in found if (root / p).exists()} | {
        p.relative_to(root)
        for suffix in GENERATED_SUFFIXES
        for p in (root / "scrollback").rglob(f"*{suffix}")
    }


def check() -> int:
    """Regenerate into a temporary directory and compare with the tree."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp_root = Path(tmp)
        generate(tmp_root)
        expected = _generated_files(tmp_root)
        actual = _generated_files(OUT_ROOT)
        problems = [f"missing: {p}" for p in sorted(expected - actual)]
        problems += [f"stale (no proto): {p}" for p in sorted(actual - expected)]
        problems += [
            f"differs: {p}"
            for p in sorted(expected & actual)
            if not filecmp.cmp(tmp_root / p, OUT_ROOT / p, shallow=False)
        ]
    if problems:
        print("codegen check failed; run `python tools/codegen.py`:", *problems, sep="\n  ")
        return 1
    print(f"codegen check ok: {len(expected)} generated files match the protos")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if generated code is stale")
    args = parser.parse_args(argv)
    if args.check:
        return check()
    generate(OUT_ROOT)
    print(f"generated code for {len(_proto_files())} proto files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
