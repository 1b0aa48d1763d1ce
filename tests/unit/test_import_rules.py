"""The rooms' import rules: arrows point inward, parsed from the source with ``ast`` (nothing is imported).

- ``errors/`` imports nothing of ours outside ``errors/``; ``formats/`` of ours only ``errors/``;
- ``spark/``, ``kafka/``, ``inspection/``, ``replay/``, ``errors/``, ``examples/`` and ``callables``
  run where Airflow is not installed: they import no ``airflow``, and of ours only each other;
- nothing but ``operators/`` and ``task_groups/`` (and the DAGs) imports ``operators/``;
- ``local/`` (the development stack) is imported by nothing in the package but ``local/``, and no
  ``local/`` server imports the CLI;
- each room (a sub-package) says what it is in a one-line docstring.

Every import counts: module level, inside functions and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import airflow_kerr

PACKAGE = Path(airflow_kerr.__file__).resolve().parent
ROOT = "airflow_kerr"
#: Rooms whose code runs on Spark executors or in plain Python: no Airflow, and of ours only each other.
PURE_ROOMS = frozenset({"errors", "formats", "spark", "kafka", "inspection", "replay", "examples", "callables"})


@dataclass(frozen=True)
class Import:
    """One imported name: ``module`` (the importer, dotted) imports ``name`` (dotted) at ``path:line``."""

    path: Path
    line: int
    module: str
    name: str

    @property
    def room(self) -> str:
        return room_of(self.module)

    @property
    def target_room(self) -> str | None:
        """The room of ours the name is in, ``""`` for ``airflow_kerr`` itself, None for anything else."""
        parts = self.name.split(".")
        if parts[0] != ROOT:
            return None
        return parts[1] if len(parts) > 1 else ""

    def __str__(self) -> str:
        return f"{self.path.relative_to(PACKAGE.parent)}:{self.line}: {self.module} imports {self.name}"


def room_of(module: str) -> str:
    """``airflow_kerr.replay.engine`` → ``replay``; ``airflow_kerr.callables`` → ``callables``; the root → ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, tree: ast.Module) -> Iterator[Import]:
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(path, node.lineno, module, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                yield Import(path, node.lineno, module, f"{source}.{alias.name}")


def modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(), str(path))) for path in sorted(PACKAGE.rglob("*.py"))]


def all_imports() -> list[Import]:
    return [found for path, tree in modules() for found in imports_of(path, tree)]


def is_airflow(name: str) -> bool:
    """The Apache Airflow package (``airflow``, ``airflow.sdk`` …), not ``airflow_kerr``."""
    return name.split(".")[0] == "airflow"


RULES: dict[str, Callable[[Import], bool]] = {
    "errors/ imports nothing of ours outside errors/": lambda i: (
        i.room == "errors" and i.target_room is not None and i.target_room != "errors"
    ),
    "formats/ imports of ours only formats/ and errors/": lambda i: (
        i.room == "formats" and i.target_room is not None and i.target_room not in ("formats", "errors")
    ),
    "spark/, kafka/, inspection/, replay/, errors/, examples/ and callables import no airflow": lambda i: (
        i.room in PURE_ROOMS and is_airflow(i.name)
    ),
    "spark/, kafka/, inspection/, replay/, errors/, examples/ and callables import of ours only each other": lambda i: (
        i.room in PURE_ROOMS and i.target_room is not None and i.target_room not in PURE_ROOMS | {""}
    ),
    "nothing but operators/ and task_groups/ imports operators/": lambda i: (
        i.target_room == "operators" and i.room not in ("operators", "task_groups")
    ),
    "nothing outside local/ imports local/": lambda i: i.target_room == "local" and i.room != "local",
    "no local/ server imports the CLI (local/cli.py)": lambda i: (
        i.room == "local" and i.module != f"{ROOT}.local.cli" and i.name.startswith(f"{ROOT}.local.cli")
    ),
}


def violations(rule: Callable[[Import], bool], found: list[Import]) -> list[str]:
    return [str(i) for i in found if rule(i)]


def report(name: str, broken: list[str]) -> str:
    return f"{name}; {len(broken)} import(s) break it:\n  " + "\n  ".join(broken)


@pytest.mark.parametrize("rule", list(RULES))
def test_import_rule(rule: str) -> None:
    broken = violations(RULES[rule], all_imports())
    assert not broken, report(rule, broken)


def test_every_room_says_what_it_is_in_one_line() -> None:
    rooms = sorted(path.parent for path in PACKAGE.glob("*/__init__.py"))
    assert rooms, f"no rooms under {PACKAGE}"
    problems = []
    for room in rooms:
        doc = ast.get_docstring(ast.parse((room / "__init__.py").read_text()))
        if not doc:
            problems.append(f"{room.name}/: no docstring")
        elif "\n" in doc.strip():
            problems.append(f"{room.name}/: the docstring has {len(doc.strip().splitlines())} lines, not one")
    assert not problems, "\n".join(problems)


# The checker itself: it must see the imports it is meant to refuse.

BAD_MODULES = {
    "errors/bad.py": "from airflow_kerr.kafka.offsets import end_offsets\n",
    "formats/bad.py": "from airflow_kerr.spark.stages import decode_json\n",
    "replay/bad.py": "def later():\n    from airflow.sdk import BaseOperator\n",
    "kafka/bad.py": "import airflow_kerr.hooks.kafka\n",
    "inspection/bad.py": "from airflow.sdk import Connection\n",
    "sensors/bad.py": "from airflow_kerr.operators import dlq_replay\n",
    "hooks/bad.py": "from ..local.broker import free_port\n",
    "local/bad.py": "from airflow_kerr.local.cli import main\n",
}


@pytest.mark.parametrize(("where", "source"), list(BAD_MODULES.items()), ids=list(BAD_MODULES))
def test_the_rules_catch_a_bad_import(where: str, source: str) -> None:
    path = PACKAGE / where
    found = list(imports_of(path, ast.parse(source)))
    broken = [name for name, rule in RULES.items() if violations(rule, found)]
    assert broken, f"no rule caught {source!r} in {where}: {[str(i) for i in found]}"
    assert all(str(i).startswith(f"airflow_kerr/{where}:") for i in found)


def test_airflow_kerr_is_not_airflow() -> None:
    assert is_airflow("airflow") and is_airflow("airflow.sdk.bases.operator")
    assert not is_airflow("airflow_kerr") and not is_airflow("airflow_kerr.errors")
