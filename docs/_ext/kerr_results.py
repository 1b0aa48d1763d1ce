"""Figures tied to their results: a quoted measurement names the results file and key it comes from.

On a docs page (MyST) a figure is written with the ``result`` role::

    first figures in {result}`5.29 s (3.44-5.47) <dlq_summary.json:summary.first_figures_s>`

The page shows the text as written, with the file and key as its tooltip. In plain Markdown (the
README, which PyPI and GitHub render without Sphinx) the same figure is a link to the file whose
title is the key, which reads fine unrendered too::

    [5.29 s (3.44-5.47)](benchmarks/results/dlq_summary.json "summary.first_figures_s")

The key is a dotted path into the JSON (a list index is a number; a key holding a dot, a space or
a slash is written in brackets: ``ratios.[replay / raw+txn].median``). The numbers in the text are
compared in order with the value: a number with one number, a ``{median, min, max}`` object with
its median, or its median, min and max (``5.29 s (3.44-5.47)``, with an en dash or a hyphen), a
list with its items. Each
written number must be the value rounded to the decimals written; ``23.7k`` and ``1.4M`` are
thousands and millions. The Sphinx build warns on a mismatch (``make docs`` turns warnings into
errors) and ``tests/unit/test_docs_figures.py`` checks every page, the README included, so a rerun
that changes a results file fails until the prose says what the file says.

After a rerun, ``python docs/_ext/kerr_results.py`` lists every figure that no longer matches, and
``python docs/_ext/kerr_results.py --fix`` rewrites each to its file's value, keeping the decimals,
the thousands commas and the k/M the text was written with (then read the prose around it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"

#: A results file, relative to benchmarks/results/ (``history/`` holds runs a later one replaced).
FILE = r"(?P<file>[\w.-]+(?:/[\w.-]+)*\.json)"
#: ``{result}`text <file.json:key>``` on a MyST page.
ROLE = re.compile(r"\{result\}`(?P<body>[^`]+)`")
#: ``[text](…benchmarks/results/file.json "key")`` in plain Markdown.
LINK = re.compile(r"\[(?P<text>[^\]]+)\]\((?:\.\./)*benchmarks/results/" + FILE + r" \"(?P<key>[^\"]+)\"\)")
#: The role's text and its target, as in Sphinx's ``text <target>``.
TARGET = re.compile(r"^(?P<text>.*?)\s*<" + FILE + r":(?P<key>[^<>]+)>$", re.DOTALL)
#: A written number: digits with thousands commas, decimals, and a k or M multiplier.
NUMBER = re.compile(r"(?<![\w.])(?P<digits>\d{1,3}(?:,\d{3})+|\d+)(?P<decimals>\.\d+)?(?P<unit>[kM](?![A-Za-z]))?")
SCALE = {"": 1.0, "k": 1e3, "M": 1e6}
#: What reads as a measurement when it is not tied: a rate, microseconds, a ratio (``0.75x``), fractional cores.
MEASUREMENT = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?[kM]?\s?(?:records/s|requests/s|core-µs|µs|x(?!\w))|(?<![\w.])\d+\.\d+\s?cores?\b"
)
FENCE = re.compile(r"^\s*(```|~~~|:::)")


@dataclass(frozen=True)
class Figure:
    """One figure of a page: the text as written, and where its value is."""

    text: str
    file: str
    key: str
    line: int

    @property
    def source(self) -> str:
        return f"benchmarks/results/{self.file} → {self.key}"


class FigureError(ValueError):
    """A figure whose file or key is missing, or whose text does not say the value."""


def parse_role(body: str, line: int = 0) -> Figure:
    """The figure of a ``result`` role's text (``5.29 s <dlq_summary.json:summary.first_figures_s.median>``)."""
    match = TARGET.match(body.strip())
    if not match:
        raise FigureError(
            f"result role {body!r}: write the figure, then its source in angle brackets, "
            "e.g. {result}`5.29 s <dlq_summary.json:summary.first_figures_s.median>`"
        )
    return Figure(match["text"], match["file"], match["key"].strip(), line)


def figures_in(markdown: str) -> list[Figure]:
    """Every figure of a page, in either form; a malformed role raises `FigureError` naming its line."""
    found = []
    for number, line in enumerate(markdown.splitlines(), start=1):
        for match in ROLE.finditer(line):
            found.append(parse_role(match["body"], number))
        for match in LINK.finditer(line):
            found.append(Figure(match["text"], match["file"], match["key"], number))
    return found


def untied(markdown: str) -> list[tuple[int, str]]:
    """``(line, text)`` of each figure that reads as a measurement but names no results file.

    A safety net, not a definition: it catches rates, microseconds, ``0.75x`` ratios and fractional
    cores written outside a ``result`` role, a results link, inline code and code fences.
    """
    found = []
    fenced = False
    for number, line in enumerate(markdown.splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        prose = re.sub(r"`[^`]*`", "", LINK.sub("", ROLE.sub("", line)))
        found += [(number, match[0]) for match in MEASUREMENT.finditer(prose)]
    return found


def key_parts(key: str) -> list[str]:
    """``ratios.[replay / raw+txn].median`` → ``["ratios", "replay / raw+txn", "median"]``."""
    parts = re.findall(r"\[([^\]]+)\]|([^.\[\]]+)", key)
    return [bracketed or plain for bracketed, plain in parts]


@cache
def _parse(path: Path, modified_ns: int) -> Any:
    """A results file's JSON, read once per version of the file (a rerun during a live docs build is seen)."""
    return json.loads(path.read_text())


def _load(path: Path) -> Any:
    return _parse(path, path.stat().st_mtime_ns)


def lookup(file: str, key: str, results: Path = RESULTS) -> Any:
    """The value at ``key`` in ``results/file``; a missing file or key raises `FigureError` naming it."""
    path = results / file
    if not path.is_file():
        raise FigureError(f"{file}: no such results file in {results}")
    value = _load(path)
    walked: list[str] = []
    for part in key_parts(key):
        walked.append(part)
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            have = sorted(value) if isinstance(value, dict) else f"a {type(value).__name__}"
            raise FigureError(f"{file}: no key {'.'.join(walked)!r} (there: {have})")
    return value


def expected_numbers(value: Any) -> list[float]:
    """The numbers a value offers to the text, in the order the text may quote them."""
    if isinstance(value, bool):
        raise FigureError(f"the value is {value}, not a number: quote it in words")
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict) and {"median", "min", "max"} <= set(value):
        return [float(value["median"]), float(value["min"]), float(value["max"])]
    if isinstance(value, list) and all(isinstance(v, int | float) for v in value):
        return [float(v) for v in value]
    kind = type(value).__name__
    raise FigureError(f"the key holds {kind} {str(value)[:80]}, not a number, a median/min/max or a list")


def written_numbers(text: str) -> list[tuple[str, float, float]]:
    """Each number written in the text: as written, its value, and the half-step its rounding allows."""
    numbers = []
    for match in NUMBER.finditer(text):
        decimals = match["decimals"] or ""
        scale = SCALE[match["unit"] or ""]
        written = float(match["digits"].replace(",", "") + decimals)
        half_step = 0.5 * 10.0 ** -(len(decimals) - 1 if decimals else 0)
        numbers.append((match[0], written * scale, half_step * scale))
    return numbers


def check(figure: Figure, results: Path = RESULTS) -> None:
    """Raise `FigureError` unless each number in the figure's text is its value, rounded as written."""
    expected = expected_numbers(lookup(figure.file, figure.key, results))
    written = written_numbers(figure.text)
    if not written:
        raise FigureError(f"{figure.text!r} quotes no number")
    if len(written) > len(expected):
        raise FigureError(f"{figure.text!r} quotes {len(written)} numbers; {figure.source} holds {len(expected)}")
    for (as_written, value, half_step), actual in zip(written, expected, strict=False):
        if abs(actual - value) > half_step * (1 + 1e-9) + 1e-12:
            raise FigureError(
                f"{figure.text!r} says {as_written}, but {figure.source} holds {actual:.6g}: "
                "update the prose (or keep the old run as its own results file)"
            )


def problems(markdown: str, results: Path = RESULTS) -> list[str]:
    """``line N: what is wrong`` for every figure of a page that its results do not bear out."""
    try:
        figures = figures_in(markdown)
    except FigureError as error:
        return [str(error)]
    found = []
    for figure in figures:
        try:
            check(figure, results)
        except FigureError as error:
            found.append(f"line {figure.line}: {error}")
    return found


def _format_like(as_written: str, value: float) -> str:
    """``value`` written the way ``as_written`` is: same decimals, thousands commas and k/M multiplier."""
    match = NUMBER.fullmatch(as_written)
    assert match, as_written
    unit = match["unit"] or ""
    decimals = len(match["decimals"] or ".") - 1
    commas = "," if "," in match["digits"] else ""
    return f"{value / SCALE[unit]:{commas}.{decimals}f}{unit}"


def updated_text(figure: Figure, results: Path = RESULTS) -> str:
    """The figure's text with each number replaced by its file's value, written as the old one was."""
    expected = expected_numbers(lookup(figure.file, figure.key, results))
    pieces, last = [], 0
    for match, value in zip(NUMBER.finditer(figure.text), expected, strict=False):
        pieces += [figure.text[last : match.start()], _format_like(match[0], value)]
        last = match.end()
    return "".join(pieces) + figure.text[last:]


def fix(markdown: str, results: Path = RESULTS) -> str:
    """The page with every figure rewritten to its file's value; a figure whose key is gone is left as is."""

    def role(match: re.Match[str]) -> str:
        body = match["body"].strip()
        figure = parse_role(body)
        try:
            new = updated_text(figure, results)
        except FigureError:
            return match[0]
        return "{result}`" + new + body[len(figure.text) :] + "`"

    def link(match: re.Match[str]) -> str:
        figure = Figure(match["text"], match["file"], match["key"], 0)
        try:
            new = updated_text(figure, results)
        except FigureError:
            return match[0]
        return "[" + new + match[0][len(match["text"]) + 1 :]

    return LINK.sub(link, ROLE.sub(role, markdown))


def main(argv: list[str]) -> int:
    """List the figures their results no longer bear out; with ``--fix``, rewrite them to the files' values."""
    rewrite = "--fix" in argv
    paths = [Path(a) for a in argv if a != "--fix"] or [
        ROOT / "README.md",
        *sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts),
    ]
    found = 0
    for path in paths:
        text = path.read_text()
        if rewrite:
            fixed = fix(text)
            if fixed != text:
                path.write_text(fixed)
                print(f"{path}: figures rewritten to their results; read the prose around them")
        for problem in problems(path.read_text()):
            found += 1
            print(f"{path}: {problem}")
    return 1 if found else 0


def _result_role(
    name: str, rawtext: str, text: str, lineno: int, inliner: Any, options: Any = None, content: Any = None
) -> tuple[list[Any], list[Any]]:
    """The ``result`` role: the figure as written, its source as the tooltip; a warning if the file disagrees."""
    from docutils import nodes

    try:
        figure = parse_role(text, lineno)
        check(figure)
    except FigureError as error:
        message = inliner.reporter.warning(f"figure not borne out by its results: {error}", line=lineno)
        return [nodes.Text(text)], [message]
    node = nodes.abbreviation(rawtext, figure.text, explanation=figure.source, classes=["kerr-result"])
    return [node], []


def setup(app: Any) -> dict[str, Any]:
    app.add_role("result", _result_role)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
