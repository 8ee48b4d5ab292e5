"""Benchmark results: each figure beside its baseline, the ratio and the target.

A `Figure` says whether its target was met; `render_table` prints them with
rich, `to_json` gives the machine-readable form (`--json-out`), and
`far_outside` is the generous check CI uses so a slow machine does not fail it.
"""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

Comparison = Literal["<=", ">="]


@dataclass(frozen=True)
class Target:
    """What the ratio must be (and optionally a ceiling on the figure itself)."""

    comparison: Comparison | None = None
    ratio: float = 0.0
    figure_max: float | None = None

    def describe(self, unit: str) -> str:
        """Human-readable, e.g. `<= 1.5x` or `<= 1.2x and < 200 MB`."""
        parts = []
        if self.comparison is not None:
            parts.append(f"{self.comparison} {self.ratio:g}x")
        if self.figure_max is not None:
            parts.append(f"< {self.figure_max:g} {unit}")
        return " and ".join(parts) if parts else "(no target: reported)"


@dataclass(frozen=True)
class Figure:
    """One measured figure beside its baseline, median of interleaved repeats."""

    key: str
    name: str
    figure: float
    baseline: float
    unit: str
    baseline_label: str
    ratio: float
    target: Target
    note: str = ""

    @property
    def met(self) -> bool | None:
        """True/False against the target; None when there is no target."""
        if self.target.comparison is None and self.target.figure_max is None:
            return None
        ok = True
        if self.target.comparison == "<=":
            ok = self.ratio <= self.target.ratio
        elif self.target.comparison == ">=":
            ok = self.ratio >= self.target.ratio
        if self.target.figure_max is not None:
            ok = ok and self.figure < self.target.figure_max
        return ok

    def far_outside(self, slack: float) -> bool:
        """Whether the ratio misses its target by more than a factor of `slack`."""
        if self.target.comparison == "<=":
            return self.ratio > self.target.ratio * slack
        if self.target.comparison == ">=":
            return self.ratio < self.target.ratio / slack
        return False


def machine() -> str:
    """A one-line description of the machine the run was on."""
    cores = os.cpu_count() or 0
    memory = ""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            kib = int(handle.readline().split()[1])
        memory = f", {kib / (1 << 20):.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{cores} cores ({cpu}, {platform.machine()}){memory}, "
        f"Python {sys.version.split()[0]}, {platform.system()} {platform.release()}"
    )


def _number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:,.1f}"
    return f"{value:,.2f}"


def _verdict(met: bool | None) -> str:
    return {True: "met", False: "MISSED", None: "-"}[met]


def render_table(figures: Sequence[Figure], title: str, console: Console | None = None) -> None:
    """Print the figures as a rich table."""
    table = Table(title=title, show_lines=False)
    for column, justify in (
        ("figure", "left"),
        ("measured", "right"),
        ("baseline", "right"),
        ("ratio", "right"),
        ("target", "left"),
        ("", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for item in figures:
        style = {True: "green", False: "red", None: "dim"}[item.met]
        table.add_row(
            item.name,
            f"{_number(item.figure)} {item.unit}",
            f"{_number(item.baseline)} {item.unit} ({item.baseline_label})",
            f"{item.ratio:.2f}x",
            item.target.describe(item.unit),
            f"[{style}]{_verdict(item.met)}[/{style}]",
        )
    (console or Console()).print(table)


def markdown_table(figures: Sequence[Figure]) -> str:
    """The figures as a Markdown table (for docs/benchmarks.md)."""
    rows = [
        "| figure | measured | baseline | ratio | target | |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for item in figures:
        rows.append(
            f"| {item.name} | {_number(item.figure)} {item.unit} | "
            f"{_number(item.baseline)} {item.unit} ({item.baseline_label}) | "
            f"{item.ratio:.2f}x | {item.target.describe(item.unit)} | {_verdict(item.met)} |"
        )
    return "\n".join(rows)


# The comments around the generated table of docs/benchmarks.md.
TABLE_START = "<!-- the table `scrollback bench --markdown-into docs/benchmarks.md` writes -->"
TABLE_END = "<!-- end of the table `scrollback bench --markdown-into` writes -->"


def markdown_into(page: str, table: str) -> str:
    """`page` with the text between its TABLE_START and TABLE_END lines replaced by `table`;
    ValueError when it lacks them."""
    lines = page.split("\n")
    try:
        start, end = lines.index(TABLE_START), lines.index(TABLE_END)
    except ValueError:
        raise ValueError("the page has no generated-table comments to write between") from None
    if end < start:
        raise ValueError("the page's generated-table comments are out of order")
    return "\n".join([*lines[: start + 1], table, *lines[end:]])


def to_json(figures: Sequence[Figure], settings: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The results as a JSON-ready dict."""
    return {
        "machine": machine(),
        "settings": settings,
        "wall_seconds": round(seconds, 1),
        "figures": [{**asdict(item), "met": item.met} for item in figures],
    }


def run_alone(
    title: str,
    measure: Callable[[Path, Callable[[str], None]], Coroutine[Any, Any, Sequence[Figure]]],
) -> int:
    """One bench module's figures on their own (`python -m scrollback_app.bench.<name>`).

    `measure(work, log)` gets a scratch directory, removed afterwards, and a progress logger.
    """
    console = Console(stderr=True)
    work = Path(tempfile.mkdtemp(prefix="scrollback-bench-"))
    try:
        figures = asyncio.run(measure(work, console.log))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    render_table(figures, title, console=Console())
    return 0
