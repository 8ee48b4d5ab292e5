"""The README as a newcomer reads it: short, its links resolving, its Quickstart leaving no litter.

The Quickstart's lines write files into the working directory; in a checkout that is the
repository root, so each file they name must be one git ignores. The figures live in
docs/benchmarks.md, whose first table has the header `scrollback bench --markdown` prints.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from scrollback_app.bench.figures import TABLE_END, TABLE_START, markdown_into, markdown_table

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _section(title: str) -> str:
    return README.read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_readme_is_under_400_lines_with_the_sections_a_user_needs() -> None:
    text = README.read_text()
    assert len(text.splitlines()) < 400
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    for wanted in ("Two commands for a fresh machine", "Quickstart", "Configuration",
                   "Security", "Deployment"):  # fmt: skip
        assert wanted in headings, headings
    assert "| figure | measured | baseline |" not in text, "figures belong in docs/benchmarks.md"


def test_two_commands_are_exactly_up_and_test() -> None:
    blocks = re.findall(r"```sh\n(.*?)```", _section("Two commands for a fresh machine"), re.S)
    assert [block.strip() for block in blocks] == ["./scripts/up", "./scripts/test"]
    for script in ("up", "test"):
        assert (ROOT / "scripts" / script).stat().st_mode & 0o111


def test_every_relative_link_of_the_readme_and_docs_resolves() -> None:
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            assert path.exists(), f"{page.name} links to {target}, which does not exist"


def test_benchmarks_doc_carries_the_table_bench_markdown_prints() -> None:
    header = markdown_table([]).splitlines()[0]
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    assert "scrollback bench" in text and "--markdown" in text
    assert header in text


def test_bench_writes_its_table_into_the_benchmarks_doc_leaving_the_rest() -> None:
    from scrollback_app.cli import build_parser

    args = build_parser().parse_args(["bench", "--markdown-into", "docs/benchmarks.md"])
    assert args.markdown_into == Path("docs/benchmarks.md")
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    table = "| figure | measured | baseline | ratio | target | |\n| --- | x |"
    written = markdown_into(page, table)
    before, generated = page.split(TABLE_START + "\n", 1)
    old_table, after = generated.split("\n" + TABLE_END, 1)
    assert old_table.startswith("| figure | measured") and old_table.count("\n") > 20
    assert written == before + TABLE_START + "\n" + table + "\n" + TABLE_END + after
    with pytest.raises(ValueError):
        markdown_into("# a page without the comments\n", table)


def _written_paths() -> list[str]:
    """Each path a Quickstart line writes: its `-o` file or its `--html` directory."""
    block = re.findall(r"```sh\n(.*?)```", _section("Quickstart"), re.S)[1]
    paths = []
    for line in block.splitlines():
        argv = shlex.split(line, comments=True)
        for flag in ("-o", "--html"):
            if flag in argv:
                paths.append(argv[argv.index(flag) + 1])
    return paths


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs git and a checkout")  # fmt: skip
def test_what_the_quickstart_writes_in_a_checkout_is_git_ignored() -> None:
    paths = _written_paths()
    assert {"photo.png", "codex.png", "attachment.png", "thumb.webp", "out/"} <= set(paths)
    for path in paths:
        probe = path + "index.html" if path.endswith("/") else path
        ignored = subprocess.run(
            ["git", "check-ignore", "-q", "--no-index", probe], cwd=ROOT, check=False
        )
        assert ignored.returncode == 0, f"{probe} would show in `git status`"
