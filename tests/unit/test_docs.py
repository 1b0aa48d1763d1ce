"""The documentation site stays true: it builds without a warning, its reference names every public
operator, sensor, trigger, hook and notifier, and every code example on it is a file that runs here.

Code examples are never written inline on a page: a page includes a file of ``docs/snippets/`` with
``literalinclude``, and each file is run below (a DAG file in a DagBag, any other module imported).
The troubleshooting page's messages are produced by the code that raises them and compared word for word.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SNIPPETS = DOCS / "snippets"
#: The packages whose public classes the reference must document, and the Airflow kinds they are.
REFERENCED_PACKAGES = ("operators", "sensors", "triggers", "hooks", "notifiers")
#: What ``make docs`` runs: warnings are errors.
SPHINX_BUILD = (sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html")


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*") if p.suffix in {".md", ".rst"} and "_build" not in p.parts)


def snippet_files() -> list[Path]:
    return sorted(SNIPPETS.glob("*.py"))


def public_airflow_classes() -> list[str]:
    """``module.Class`` of every class defined in the referenced packages that is an Airflow operator, trigger, ..."""
    from airflow.sdk import BaseHook, BaseNotifier, BaseOperator
    from airflow.triggers.base import BaseTrigger

    kinds = (BaseOperator, BaseHook, BaseNotifier, BaseTrigger)
    found = []
    for package in REFERENCED_PACKAGES:
        parent = importlib.import_module(f"airflow_kerr.{package}")
        for info in pkgutil.iter_modules(parent.__path__):
            module = importlib.import_module(f"{parent.__name__}.{info.name}")
            for name, obj in vars(module).items():
                if (
                    inspect.isclass(obj)
                    and obj.__module__ == module.__name__
                    and not name.startswith("_")
                    and issubclass(obj, kinds)
                ):
                    found.append(f"{module.__name__}.{name}")
    return sorted(found)


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make docs``'s build (warnings as errors) into a temporary folder; about 10 s.

    The docs tools come with the ``dev`` extra (``make install``); make matrix's virtualenvs, which hold
    the runtime extras and the test tools only, skip the build.
    """
    for tool in ("sphinx", "myst_parser", "furo"):
        pytest.importorskip(tool, reason="the docs extra is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("docs")
    done = subprocess.run(
        [*SPHINX_BUILD, "-d", str(out / "doctrees"), str(DOCS), str(out / "html")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"the docs build failed or warned:\n{done.stderr[-5000:]}"
    return out / "html"


def test_there_is_something_to_check() -> None:
    classes = public_airflow_classes()
    assert "airflow_kerr.operators.error_aware_spark.ErrorAwareSparkSubmitOperator" in classes
    assert "airflow_kerr.notifiers.tolerance_breach.ToleranceBreachNotifier" in classes
    assert len(snippet_files()) >= 10


def test_every_public_operator_sensor_trigger_hook_and_notifier_is_in_the_reference() -> None:
    reference = "\n".join(p.read_text() for p in (DOCS / "reference").glob("*.rst"))
    documented = set(re.findall(r"^\.\. autoclass:: (\S+)", reference, re.MULTILINE))
    missing = [name for name in public_airflow_classes() if name not in documented]
    assert not missing, f"add an ``.. autoclass::`` for each to docs/reference/: {missing}"


def test_the_site_builds_without_a_warning_and_renders_every_class(built_site: Path) -> None:
    html = "\n".join(p.read_text() for p in (built_site / "reference").glob("*.html"))
    missing = [name for name in public_airflow_classes() if f'id="{name}"' not in html]
    assert not missing, f"the built reference does not render: {missing}"
    assert (built_site / "getting-started.html").is_file()


def test_no_page_writes_a_python_example_inline() -> None:
    """A Python example on a page is a file under docs/snippets/ (literalinclude), which the tests below run."""
    inline = [
        str(page.relative_to(REPO))
        for page in pages()
        if re.search(r"^```(python|py)\s*$|^\.\. code-block:: python", page.read_text(), re.MULTILINE)
    ]
    assert not inline, f"move these pages' Python examples into docs/snippets/: {inline}"


def test_every_snippet_is_on_a_page_and_every_included_file_exists() -> None:
    included: set[Path] = set()
    for page in pages():
        for target in re.findall(r"literalinclude(?:\}|::) *(\S+)", page.read_text()):
            path = (page.parent / target).resolve()
            assert path.is_file(), f"{page.relative_to(REPO)} includes {target}, which does not exist"
            included.add(path)
    unused = [p.name for p in snippet_files() if p.resolve() not in included]
    assert not unused, f"snippets no page shows: {unused}"


def dag_snippets() -> list[Path]:
    return [p for p in snippet_files() if "DAG(" in p.read_text()]


def module_snippets() -> list[Path]:
    return [p for p in snippet_files() if "DAG(" not in p.read_text()]


@pytest.mark.parametrize("snippet", dag_snippets(), ids=lambda p: p.name)
def test_every_dag_snippet_loads_in_a_dagbag(snippet: Path, tmp_path: Path) -> None:
    from airflow_kerr.compat import DagBag

    dag_file = tmp_path / snippet.name
    dag_file.write_text(snippet.read_text())
    bag = DagBag(dag_folder=str(dag_file))
    assert bag.import_errors == {}
    assert bag.dag_ids, f"{snippet.name} defines no DAG"


@pytest.mark.parametrize("snippet", module_snippets(), ids=lambda p: p.name)
def test_every_other_snippet_runs(snippet: Path) -> None:
    namespace = runpy.run_path(str(snippet), run_name=f"docs_snippet_{snippet.stem}")
    assert any(not name.startswith("__") for name in namespace), f"{snippet.name} defines nothing"


def test_the_batch_transformation_snippet_passes_good_batches_and_raises_on_bad_ones() -> None:
    import pyarrow as pa

    validate: Any = runpy.run_path(str(SNIPPETS / "batch_transformation.py"))["validate"]
    good = pa.RecordBatch.from_pydict({"value": [{"amount": 5.0}, {"amount": 1.5}], "offset": [0, 1]})
    bad = pa.RecordBatch.from_pydict({"value": [{"amount": 5.0}, {"amount": -1.0}], "offset": [0, 1]})
    assert validate(good).num_rows == 2
    with pytest.raises(ValueError, match="non-positive amount"):
        validate(bad)


def test_the_message_queue_snippet_builds_our_dlq_watch() -> None:
    namespace = runpy.run_path(str(SNIPPETS / "message_queue_asset.py"))
    classpath, kwargs = namespace["DLQ_GREW"].watchers[0].trigger.serialize()
    assert classpath == "airflow_kerr.triggers.dead_letter_queue_events.DeadLetterQueueEventTrigger"
    assert (kwargs["topic"], kwargs["min_records"]) == ("orders.dlq", 10)


def test_the_event_driven_snippet_is_scheduled_on_the_breach_watch(tmp_path: Path) -> None:
    from airflow_kerr.compat import DagBag

    dag_file = tmp_path / "event_driven_dag.py"
    dag_file.write_text((SNIPPETS / "event_driven_dag.py").read_text())
    bag = DagBag(dag_folder=str(dag_file))
    assert bag.dag_ids == ["orders_on_breach"]
    assert "event=breach" in str(bag.dags["orders_on_breach"].timetable.asset_condition)


def test_every_message_on_the_troubleshooting_page_is_the_codes_own() -> None:
    messages: Any = runpy.run_path(str(SNIPPETS / "troubleshooting_messages.py"))["MESSAGES"]
    page = (DOCS / "troubleshooting.md").read_text()
    for name, produce in messages.items():
        assert produce() in page, f"docs/troubleshooting.md no longer shows the {name} message as the code writes it"


def test_every_quoted_fragment_on_the_troubleshooting_page_is_in_the_source() -> None:
    source = "\n".join(p.read_text() for p in (REPO / "airflow_kerr").rglob("*.py")) + (REPO / "Makefile").read_text()
    page = (DOCS / "troubleshooting.md").read_text()
    lines = [line for line in page.splitlines() if line.startswith("Message: ")]
    assert len(lines) >= 8
    for line in lines:
        for fragment in re.findall(r"`([^`]+)`", line):
            if len(fragment) >= 3:
                assert fragment in source, f"troubleshooting quotes {fragment!r}, which no source file says"


def test_contributing_names_every_room_of_the_package() -> None:
    """CONTRIBUTING.md's layout has a line for every subpackage and top-level module of airflow_kerr."""
    layout = (REPO / "CONTRIBUTING.md").read_text().split("## Layout", 1)[1].split("## ", 1)[0]
    rooms = [f"{p.name}/" for p in (REPO / "airflow_kerr").iterdir() if (p / "__init__.py").is_file()]
    rooms += [p.name for p in (REPO / "airflow_kerr").glob("*.py") if p.name != "__init__.py"]
    missing = [room for room in sorted(rooms) if not re.search(rf"^\s+{re.escape(room)}\s", layout, re.MULTILINE)]
    assert not missing, f"CONTRIBUTING.md's layout lacks: {missing}"


def test_the_errors_reference_lists_every_key_with_its_default() -> None:
    """The table in the error-aware job's guide has one row per errors.* key the code accepts, default as the code's."""
    from airflow_kerr.errors.config import ErrorHandlingConfig

    page = (DOCS / "guides" / "error-aware-job.md").read_text()
    rows = dict(re.findall(r"^\| `(errors\.[a-z.]+)` \| `([^`]*)` \|", page, re.MULTILINE))
    defaults = {key: value or '""' for key, value in ErrorHandlingConfig().to_properties().items()}
    assert rows == defaults, "docs/guides/error-aware-job.md's errors.* table differs from the code's keys or defaults"
