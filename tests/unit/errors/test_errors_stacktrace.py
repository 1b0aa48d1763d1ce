"""The stacktrace header and context text: the standard traceback, chained causes included, minus ^^^ markers."""

from __future__ import annotations

import json
import traceback

from airflow_kerr.errors import format_stacktrace


def _nested_failure() -> BaseException:
    try:
        try:
            json.loads(b"{oops")
        except ValueError as error:
            raise RuntimeError("could not convert the value") from error
    except RuntimeError as wrapped:
        return wrapped
    raise AssertionError("unreachable")


def _without_caret_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not (line.strip() and set(line.strip()) <= set("^~"))]


def test_matches_the_standard_traceback_without_caret_lines() -> None:
    error = _nested_failure()
    head, body = format_stacktrace(error).split("\n", 1)
    assert head == "RuntimeError: could not convert the value"
    assert _without_caret_lines(body) == _without_caret_lines("".join(traceback.format_exception(error)))
    assert "The above exception was the direct cause of the following exception:" in body
    assert "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes" in body


def test_a_suppressed_context_is_left_out() -> None:
    try:
        try:
            raise KeyError("inner")
        except KeyError:
            raise ValueError("outer") from None
    except ValueError as error:
        text = format_stacktrace(error)
    assert "KeyError" not in text and text.startswith("ValueError: outer")
