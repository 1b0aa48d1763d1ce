"""The README is a landing page: a page long, its DAG file the docs' first snippet, its links alive.

The README's DAG file is ``docs/snippets/first_dag.py`` word for word, so the DagBag test here and
the docs tests (tests/unit/test_docs.py) load what a user copies. The other examples live on the site.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
FIRST_DAG = REPO / "docs" / "snippets" / "first_dag.py"


def first_python_block(text: str) -> str:
    match = re.search(r"^```python\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)
    assert match is not None, "README.md has no ```python block"
    return match.group(1)


def test_the_readme_fits_on_a_page() -> None:
    lines = README.read_text().count("\n")
    assert lines <= 160, f"README.md has {lines} lines: move the detail into docs/ and link it"


def test_the_readme_dag_file_is_the_docs_first_snippet() -> None:
    assert first_python_block(README.read_text()) == FIRST_DAG.read_text(), (
        "README.md's DAG file and docs/snippets/first_dag.py differ: change both"
    )


def test_the_readme_dag_file_loads_in_a_dagbag(tmp_path: Path) -> None:
    from airflow_kerr.compat import DagBag

    dag_file = tmp_path / "readme_dag.py"
    dag_file.write_text(first_python_block(README.read_text()))

    bag = DagBag(dag_folder=str(dag_file))

    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == ["orders_guard", "orders_pipeline"]


def test_every_link_of_the_readme_to_a_file_of_the_repository_resolves() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert local, "the README links to no page of the site"
    missing = [t for t in local if not (REPO / t).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def install_lines(text: str) -> list[set[str]]:
    """The extras of each ``pip install 'airflow-provider-kerr[...]'`` line in ``text``."""
    found = re.findall(r"^pip install 'airflow-provider-kerr\[([a-z,]+)\]'", text, re.MULTILINE)
    return [set(extras.split(",")) for extras in found]


def test_every_install_line_brings_what_the_first_one_does() -> None:
    """tests/package/test_wheel.py loads the README's DAG after the first install line; the others add to it."""
    for page in (README, REPO / "docs" / "getting-started.md"):
        lines = install_lines(page.read_text())
        assert lines, f"{page.name} has no install line"
        assert all(lines[0] <= extras for extras in lines[1:]), f"{page.name}: {lines}"
    assert install_lines(README.read_text()) == install_lines((REPO / "docs" / "getting-started.md").read_text())
