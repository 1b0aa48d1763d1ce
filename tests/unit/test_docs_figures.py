"""Every figure the docs quote is the value of its results file, rounded as written.

A measurement on a page is written ``{result}`5.29 s <dlq_summary.json:summary.first_figures_s.median>```
(MyST) or, in the README, ``[5.29 s](benchmarks/results/dlq_summary.json "summary.first_figures_s.median")``;
``docs/_ext/kerr_results.py`` defines both. A rerun that changes a results file fails here until the
prose says what the file says. Reads files only: no services, no Sphinx.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _kerr_results() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kerr_results", REPO / "docs" / "_ext" / "kerr_results.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("kerr_results", module)
    spec.loader.exec_module(module)
    return module


kr = _kerr_results()


#: Figures that read as measurements but are not: ``(page, text)`` and why.
NOT_MEASURED = {
    ("docs/speed.md", "6.7 core-µs"): "arithmetic: two cores divided by the 300k records/s target",
}


def pages() -> list[Path]:
    docs = [p for p in (REPO / "docs").rglob("*.md") if "_build" not in p.parts]
    return [REPO / "README.md", *sorted(docs)]


@pytest.fixture
def results(tmp_path: Path) -> Path:
    (tmp_path / "bench.json").write_text(
        json.dumps(
            {
                "summary": {"first_s": {"median": 5.285, "min": 3.44, "max": 5.468, "n": 3}},
                "ratios": {"replay / raw+txn": {"median": 0.7475, "min": 0.6566, "max": 1.2162}},
                "rate": 23690.76,
                "runs": [{"rate": 1_238_400.0}],
                "met": False,
            }
        )
    )
    return tmp_path


def test_the_docs_quote_figures_and_every_one_is_its_results_value() -> None:
    found = {page: kr.figures_in(page.read_text()) for page in pages()}
    assert sum(len(figures) for figures in found.values()) >= 130, "the pages quote fewer figures than expected"
    wrong = [f"{page.relative_to(REPO)} {problem}" for page in pages() for problem in kr.problems(page.read_text())]
    assert not wrong, "figures that their results files do not bear out:\n" + "\n".join(wrong)


def test_no_page_quotes_a_measurement_without_its_results_file() -> None:
    """A rate, microseconds, a ratio or fractional cores outside a {result} role is a figure with no source."""
    untied = [
        f"{page.relative_to(REPO)}:{line}: {text}"
        for page in pages()
        for line, text in kr.untied(page.read_text())
        if (str(page.relative_to(REPO)), text) not in NOT_MEASURED
    ]
    assert not untied, "tie these figures to their results with {result}`text <file.json:key>`:\n" + "\n".join(untied)


def test_untied_measurements_are_found_outside_code_and_roles() -> None:
    page = (
        "ran at 23.7k records/s, 0.75x the loop, 4.0 µs a record, 0.02 cores, on 2 cores\n"
        "tied: {result}`0.75x <replay.json:k>` and `1.5x` in code and 30 s and 500 ms settings\n"
        "```text\n12k records/s\n```\n"
    )
    assert kr.untied(page) == [(1, "23.7k records/s"), (1, "0.75x"), (1, "4.0 µs"), (1, "0.02 cores")]


def test_a_figure_reads_its_median_min_and_max_rounded_as_written(results: Path) -> None:
    page = "first figures in {result}`5.29 s (3.44\u20135.47) <bench.json:summary.first_s>`, then"
    assert kr.problems(page, results) == []
    link = 'replay at [23.7k records/s](../benchmarks/results/bench.json "rate"), [1,238k](x) plain'
    assert [f.key for f in kr.figures_in(link)] == ["rate"]
    assert kr.problems(link, results) == []
    assert kr.problems("{result}`0.75x <bench.json:ratios.[replay / raw+txn].median>`", results) == []
    assert kr.problems("{result}`1.2M <bench.json:runs.0.rate>`", results) == []


def test_a_rerun_that_changes_the_file_fails_until_the_prose_follows(results: Path) -> None:
    page = "text\n{result}`5.29 s (3.44\u20135.47) <bench.json:summary.first_s>`\n"
    data = json.loads((results / "bench.json").read_text())
    data["summary"]["first_s"]["min"] = 3.46
    (results / "rerun.json").write_text(json.dumps(data))
    [problem] = kr.problems(page.replace("bench.json", "rerun.json"), results)
    assert problem.startswith("line 2: ")
    assert "says 3.44, but benchmarks/results/rerun.json → summary.first_s holds 3.46" in problem


@pytest.mark.parametrize(
    ("page", "says"),
    [
        ("{result}`5.2 s <bench.json:summary.first_s.median>`", "says 5.2, but"),
        ("{result}`5.29 s <gone.json:summary.first_s.median>`", "gone.json: no such results file"),
        ("{result}`5.29 s <bench.json:summary.first>`", "no key 'summary.first' (there: ['first_s'])"),
        ("{result}`no <bench.json:met>`", "the value is False, not a number"),
        ("{result}`about five seconds <bench.json:rate>`", "quotes no number"),
        ("{result}`1 2 3 4 <bench.json:summary.first_s>`", "quotes 4 numbers"),
        ("{result}`5.29 s from dlq_summary.json`", "write the figure, then its source in angle brackets"),
    ],
)
def test_a_wrong_or_unsourced_figure_is_named_with_what_is_wrong(results: Path, page: str, says: str) -> None:
    [problem] = kr.problems(page, results)
    assert says in problem


def test_fix_rewrites_each_figure_to_its_files_value_as_it_was_written(results: Path) -> None:
    """After a rerun, ``kerr_results.py --fix`` brings the prose to the file: same decimals, commas and k."""
    page = (
        "first {result}`5.1 s (3.4\u20135.9) <bench.json:summary.first_s>` then "
        '[21.0k records/s](benchmarks/results/bench.json "rate") and {result}`1,000k <bench.json:runs.0.rate>`\n'
    )
    assert len(kr.problems(page, results)) == 3
    fixed = kr.fix(page, results)
    assert fixed == (
        "first {result}`5.3 s (3.4\u20135.5) <bench.json:summary.first_s>` then "
        '[23.7k records/s](benchmarks/results/bench.json "rate") and {result}`1,238k <bench.json:runs.0.rate>`\n'
    )
    assert kr.problems(fixed, results) == []
