"""Tables generated from the code, so they cannot drift from it: ``replay-settings`` renders the replay's settings.

The replay's trigger form, its DAG's Params and the DLQ view's form are built from one list,
``airflow_kerr.replay.form.REPLAY_FORM``; this directive renders that same list. The table is built
from docutils nodes, so it reads the same from a MyST page and from an RST one.
"""

from __future__ import annotations

import re
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive


def _inline(text: str, strong: str = "") -> nodes.paragraph:
    """A paragraph of ``text`` whose `backticked` parts are code, after ``strong`` in bold."""
    paragraph = nodes.paragraph()
    if strong:
        paragraph += nodes.strong(text=strong)
        paragraph += nodes.Text(" ")
    for i, part in enumerate(re.split(r"`([^`]+)`", " ".join(text.split()))):
        if part:
            paragraph += nodes.literal(text=part) if i % 2 else nodes.Text(part)
    return paragraph


def _row(*cells: nodes.paragraph) -> nodes.row:
    row = nodes.row()
    for cell in cells:
        entry = nodes.entry()
        entry += cell
        row += entry
    return row


class ReplaySettings(Directive):
    """A table of every setting of the DLQ replay: name, form section, default in the form, title and help."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from airflow_kerr.replay.form import REPLAY_FORM

        widths = (22, 12, 16, 50)
        group = nodes.tgroup(cols=len(widths))
        for width in widths:
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        head += _row(*(_inline(t) for t in ("setting", "form section", "default in the form", "what it does")))
        body = nodes.tbody()
        for field in REPLAY_FORM:
            body += _row(
                _inline(f"`{field.name}`"),
                _inline(field.section),
                _inline(f"`{field.default!r}`"),
                _inline(field.description, strong=f"{field.title}."),
            )
        group += head
        group += body
        table = nodes.table(classes=["kerr-replay-settings"])
        table += group
        return [table]


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("replay-settings", ReplaySettings)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
