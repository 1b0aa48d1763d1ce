"""Pages a user reads: no paragraph of README.md or docs/ runs over six lines, and every code fence closes.

A paragraph is a run of non-blank prose lines outside code fences (```` ``` ````, ``~~~``, MyST's
``:::``), tables, headings and directive options; each item of a list is a paragraph of its own.
Its length is counted as the reader sees it, in lines of 120 characters, a ``{result}`` role counted
by its text alone (not its ``<file:key>``), so a long source line cannot hide a long paragraph.
Reads files only: no Sphinx, no services.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 6
LINE_WIDTH = 120
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
ROLE_TARGET = re.compile(r"\{result\}`([^`]*?)\s*<[^<>`]+>`")


@dataclass(frozen=True)
class Paragraph:
    first_line: int
    lines: list[str]

    @property
    def length(self) -> int:
        """Lines as the reader sees them: each source line, wrapped at LINE_WIDTH, roles by their text."""
        return sum(max(1, math.ceil(len(ROLE_TARGET.sub(r"\1", line.strip())) / LINE_WIDTH)) for line in self.lines)


def pages() -> list[Path]:
    docs = [p for p in (REPO / "docs").rglob("*.md") if "_build" not in p.parts]
    return [REPO / "README.md", *sorted(docs)]


def closes(match: re.Match[str], fence: str) -> bool:
    """Whether a fence line closes ``fence``: the same character, at least as many, no info string."""
    return match["fence"][0] == fence[0] and len(match["fence"]) >= len(fence) and not match["info"].strip()


def unclosed_fence(markdown: str) -> int | None:
    """The line number of a code fence that never closes, or None."""
    opened: tuple[int, str] | None = None
    for number, line in enumerate(markdown.splitlines(), start=1):
        match = FENCE.match(line)
        if not match:
            continue
        fence = match["fence"]
        if opened is None:
            opened = (number, fence)
        elif closes(match, opened[1]):
            opened = None
    return opened[0] if opened else None


def paragraphs(markdown: str) -> list[Paragraph]:
    """The prose paragraphs and list items of a page, outside fences, tables, headings and directive options."""
    found: list[Paragraph] = []
    current: list[str] = []
    start = 0
    fence: str | None = None

    def close() -> None:
        nonlocal current
        if current:
            found.append(Paragraph(start, current))
        current = []

    for number, line in enumerate(markdown.splitlines(), start=1):
        match = FENCE.match(line)
        if fence is not None:
            if match and closes(match, fence):
                fence = None
            continue
        if match:
            close()
            fence = match["fence"]
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith(("|", "#", ":", "<!--", "![", "```", ">")):
            close()
            continue
        if LIST_ITEM.match(line):
            close()
        if not current:
            start = number
        current.append(line)
    close()
    return found


def test_the_checks_see_what_they_should() -> None:
    page = "intro\n\n" + "\n".join(["x"] * 7) + "\n\n```bash\nls\n```\n\n- a\n  b\n- c\n\n| t |\n|---|\n"
    assert [(p.first_line, p.length) for p in paragraphs(page)] == [(1, 1), (3, 7), (15, 2), (17, 1)]
    assert unclosed_fence(page) is None
    assert unclosed_fence("text\n\n```bash\nls\n") == 3
    assert unclosed_fence("````md\n```python\nx\n```\n````\n") is None
    # 259 characters wrap to 3 lines; the role counts by its text (1 line), not its 200-character target.
    assert paragraphs("a " * 130 + "\n{result}`1 s <f.json:" + "k" * 200 + ">`\n")[0].length == 3 + 1


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_code_fence_closes(page: Path) -> None:
    line = unclosed_fence(page.read_text())
    assert line is None, f"{page.relative_to(REPO)}: the code fence opened on line {line} never closes"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_paragraph_runs_over_six_lines(page: Path) -> None:
    long = [f"line {p.first_line}: {p.length} lines" for p in paragraphs(page.read_text()) if p.length > MAX_LINES]
    assert not long, f"{page.relative_to(REPO)}: split or shorten these paragraphs (at most {MAX_LINES} lines): {long}"
