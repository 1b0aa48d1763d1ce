"""``make matrix``: prove the floor. The provider on one Airflow per minor line, each in its own virtualenv.

For each Airflow version (default: the floor 3.2.2 and the newest 3.3) a
virtualenv ``.kerr/matrix/airflow-<version>`` is built with ``uv`` (cached: rebuilt only
when pyproject.toml or the pins change; the provider is installed editable, so the
working tree is what runs), holding that Airflow, the provider with its spark, local,
slack, openlineage and messaging extras, and the test tools. Then, in it:

``import``  every module of ``airflow_kerr`` imports;
``unit``    ``tests/unit`` without Spark or Kafka Connect (``make unit``'s selection);
``dagbag``  a DagBag of ``dags/`` with zero import errors;
``event``   one real ``airflow standalone`` (scheduler, triggerer, dag-processor) run in which
            an AssetWatcher on our DLQ event trigger starts a DAG (``tests/matrix/event_run.py``).

A per-version table with each step's result and seconds is printed at the end and written
to ``.kerr/matrix/results.json``; the exit status is 0 only if every step passed.
``--steps import,unit,dagbag`` is what ``make test`` runs on the floor. Other versions
(``--versions 3.1.8``) can be tried: pyproject's floor makes uv refuse them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOME = REPO / ".kerr" / "matrix"
#: The floor (pyproject's apache-airflow>=3.2.2) and the newest 3.3 on PyPI when measured. The 3.1 line was
#: measured and left out (README, "Supported Airflow versions"): 3.1.0's event run fails inside Airflow.
VERSIONS = ("3.2.2", "3.3.2")
STEPS = ("import", "unit", "dagbag", "event")
EXTRAS = "spark,local,slack,openlineage,messaging"
TOOLS = ["pytest>=8", "pytest-asyncio>=0.24", "pytest-timeout>=2.3", "hypothesis>=6.100", "pyyaml>=6"]
#: Pins an Airflow release needs beyond its own metadata (Airflow's constraints files pin them, but those are
#: on GitHub, not PyPI). Airflow 3.2.2 with FastAPI 0.165 and cadwyn 8 (what uv picks unpinned) fails to
#: build its execution API: "Model 'TITerminalStatePayload' needs a discriminator", so no task ever runs;
#: with FastAPI 0.136 and cadwyn 7 (what 3.3.2 resolves to) it runs. 3.1.0 imports structlog.dev.Styles.
PINS: dict[str, list[str]] = {"3.1.0": ["structlog<25.5"], "3.2.2": ["fastapi<0.137", "cadwyn<8"]}
UNIT_MARKERS = "not spark and not connect"

IMPORT_ALL = """
import importlib, pkgutil, airflow_kerr
names = [m.name for m in pkgutil.walk_packages(airflow_kerr.__path__, "airflow_kerr.")]
bad = []
for name in names:
    try:
        importlib.import_module(name)
    except Exception as error:
        bad.append(f"{name}: {error!r}")
print(f"{len(names) - len(bad)} of {len(names)} modules import")
print("\\n".join(bad))
raise SystemExit(1 if bad else 0)
"""

DAGBAG = """
try:
    from airflow.dag_processing.dagbag import DagBag  # Airflow 3.3
except ImportError:
    from airflow.models.dagbag import DagBag
bag = DagBag(dag_folder="dags")  # examples are off: AIRFLOW__CORE__LOAD_EXAMPLES=False
print(f"{len(bag.dags)} DAGs, {len(bag.import_errors)} import errors")
for path, error in bag.import_errors.items():
    print(path, error)
raise SystemExit(1 if bag.import_errors or not bag.dags else 0)
"""


def uv() -> Path:
    """uv in its own small virtualenv under .kerr/matrix/tools (pip reads this machine's pip.conf)."""
    tools = HOME / "tools"
    binary = tools / "bin" / "uv"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True)
        subprocess.run([str(tools / "bin" / "pip"), "install", "--quiet", "uv"], check=True)
    return binary


def index_arguments() -> list[str]:
    """pip's configured indexes and find-links, for uv (which does not read pip.conf); none: PyPI."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    arguments: list[str] = []
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        values = value.strip().strip("'\"").split()
        option = key.split(".")[-1]
        if option == "index-url":
            arguments += [f"--index-url={v}" for v in values]
        elif option == "extra-index-url":
            arguments += [f"--extra-index-url={v}" for v in values]
        elif option == "find-links":
            arguments += [f"--find-links={v}" for v in values]
    if len(arguments) > 0:
        arguments.append("--index-strategy=unsafe-best-match")  # pip's rule: the best version over all indexes
    return arguments


def build(version: str, log: Path) -> Path:
    """The virtualenv for ``version``, built unless one with the same pyproject and pins exists."""
    venv = HOME / f"airflow-{version}"
    python = venv / "bin" / "python"
    requirements = [f"apache-airflow=={version}", *PINS.get(version, []), *TOOLS]
    key = hashlib.sha256(((REPO / "pyproject.toml").read_text() + "\n".join(requirements)).encode()).hexdigest()
    marker = venv / ".kerr-built"
    if python.exists() and marker.exists() and marker.read_text() == key:
        return python
    with open(log, "ab") as out:
        subprocess.run(
            [str(uv()), "venv", "--quiet", "--allow-existing", "--python", sys.executable, str(venv)],
            check=True,
            stdout=out,
            stderr=out,
        )
        subprocess.run(
            [
                str(uv()),
                "pip",
                "install",
                "--python",
                str(python),
                *index_arguments(),
                "-e",
                f".[{EXTRAS}]",
                *requirements,
            ],
            cwd=REPO,
            check=True,
            stdout=out,
            stderr=out,
        )
    marker.write_text(key)
    return python


def command(step: str, python: Path, version: str) -> list[str]:
    if step == "import":
        return [str(python), "-c", IMPORT_ALL]
    if step == "unit":
        basetemp = HOME / f"pytest-{version}"
        return [
            str(python),
            "-m",
            "pytest",
            "tests/unit",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            UNIT_MARKERS,
            f"--basetemp={basetemp}",
        ]
    if step == "dagbag":
        return [str(python), "-c", DAGBAG]
    return [str(python), str(REPO / "tests" / "matrix" / "event_run.py")]


def run(versions: list[str], steps: list[str]) -> int:
    HOME.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, tuple[str, float, str]]] = {}
    for version in versions:
        log = HOME / f"airflow-{version}.log"
        log.write_bytes(b"")
        row = results[version] = {}
        started = time.monotonic()
        print(f"== Airflow {version}: virtualenv (log {log.relative_to(REPO)})", flush=True)
        try:
            python = build(version, log)
        except subprocess.CalledProcessError:
            row["venv"] = ("FAIL", time.monotonic() - started, "see the log")
            continue
        row["venv"] = ("ok", time.monotonic() - started, "")
        env = {**os.environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("VIRTUAL_ENV", None)
        env.pop("AIRFLOW_HOME", None)
        for step in steps:
            print(f"== Airflow {version}: {step}", flush=True)
            started = time.monotonic()
            with open(log, "a") as out:
                out.write(f"\n==== {step}\n")
                out.flush()
                done = subprocess.run(command(step, python, version), cwd=REPO, env=env, capture_output=True, text=True)
                out.write(done.stdout + done.stderr)
            lines = [line for line in done.stdout.splitlines() if line.strip()]
            summary = lines[-1] if lines else ""
            row[step] = ("ok" if done.returncode == 0 else "FAIL", time.monotonic() - started, summary[:70])
            if done.returncode != 0:
                print(done.stdout[-3000:] + done.stderr[-3000:], flush=True)
    (HOME / "results.json").write_text(json.dumps(results, indent=2))
    print()
    print(f"{'Airflow':<9} {'step':<7} {'result':<6} {'seconds':>7}  summary")
    for version, row in results.items():
        for step, (result, seconds, summary) in row.items():
            print(f"{version:<9} {step:<7} {result:<6} {seconds:>7.0f}  {summary}")
    failed = [f"{v} {s}" for v, row in results.items() for s, (result, _, _) in row.items() if result != "ok"]
    print("matrix: all passed" if not failed else f"matrix: FAILED: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests/matrix/run.py", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--versions", default=",".join(VERSIONS), help=f"Airflow versions (default {','.join(VERSIONS)})"
    )
    parser.add_argument("--steps", default=",".join(STEPS), help=f"steps to run (default {','.join(STEPS)})")
    args = parser.parse_args(argv)
    steps = [step for step in args.steps.split(",") if step]
    unknown = set(steps) - set(STEPS)
    if unknown:
        parser.error(f"unknown steps {sorted(unknown)}; choose from {', '.join(STEPS)}")
    return run([v for v in args.versions.split(",") if v], steps)


if __name__ == "__main__":
    sys.exit(main())
