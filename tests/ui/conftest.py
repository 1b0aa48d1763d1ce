"""What every browser test needs: Debian's chromium, ``make ui``'s stack for the module, a fresh page.

The browser tests share one local UI stack (``airflow standalone``, a Kafka Connect worker,
the session's broker), started by :func:`airflow_kerr.local.ui.start_local_ui`, the code
behind ``make ui``, so a test clicks through exactly what a person gets. The stack costs
about 100 s and two cores while it starts, so every module of tests/ui uses the same one:
each test names its own topics and groups, so none depends on what another left.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from airflow_kerr.local.broker import free_port
from airflow_kerr.local.ui import ROLE, USERNAME, LocalUI, pid_alive, process_tree, start_local_ui

#: A user of the shared stack with Airflow's viewer role; Airflow generates its password into the passwords file.
VIEWER = "viewer"
DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"
#: Where the browser tests leave screenshots, so a person can see what a test saw.
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM = Path(os.environ.get("KERR_CHROMIUM", "/usr/bin/chromium"))
# The flags headless chromium needs as root in a container with no GPU, and no calls home.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's chromium and the Playwright driver; fail (never skip) saying what to install."""
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append(
            "the Python package 'playwright' (pip install -e '.[dev]'; do not run 'playwright install', "
            "the test drives Debian's chromium)"
        )
    if not (CHROMIUM.exists() and os.access(CHROMIUM, os.X_OK)):
        found = shutil.which("chromium")
        missing.append(
            f"chromium at {CHROMIUM} (Debian: apt-get install chromium; make test installs it when run as root"
            + (f"; one was found at {found}, point KERR_CHROMIUM at it" if found else "")
            + ")"
        )
    if missing:
        pytest.fail("The browser test needs " + " and ".join(missing))
    return CHROMIUM


#: Every example DAG in dags/: the stack waits until each is parsed, so any test can trigger any of them.
EXAMPLE_DAGS = (
    "avro_orders",
    "dlq_auto_replay",
    "dlq_replay",
    "error_aware_pipeline",
    "on_tolerance_breach",
    "on_tolerance_recovery",
    "smoke_spark_kafka",
    "tolerance_guard",
)


@pytest.fixture(scope="session")
def example_dags() -> tuple[str, ...]:
    """The example DAGs' ids, checked against dags/ so a new example DAG is not left out of the browser tests."""
    found = tuple(sorted(path.stem for path in DAGS_FOLDER.glob("*.py")))
    assert found == EXAMPLE_DAGS, f"dags/ holds {found}; tests/ui/conftest.EXAMPLE_DAGS lists {EXAMPLE_DAGS}"
    return EXAMPLE_DAGS


@pytest.fixture(scope="session")
def local_ui(chromium: Path, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalUI]:
    """``make ui``'s stack on free ports, sharing the session's broker; afterwards every process it started is gone."""
    ui = start_local_ui(
        tmp_path_factory.mktemp("kerr-ui"),
        port=free_port(),
        connect_port=free_port(),
        bootstrap_servers=kafka_bootstrap,
        seed_sample_dlq=False,
        wait_for_dags=EXAMPLE_DAGS,
        # A second user with Airflow's read-only role, for the permission checks of the DLQ view.
        environment={"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USERNAME}:{ROLE},{VIEWER}:viewer"},
        startup_timeout_s=300,
    )
    assert ui.process is not None and ui.execution_api is not None
    try:
        yield ui
    finally:
        started = process_tree(ui.process.pid) + process_tree(ui.execution_api.pid)
        ui.stop()
    left = [process for process in started if pid_alive(process)]
    assert not left, f"processes of the local UI still run after stop(): {left}"


@contextmanager
def _headless_page(chromium: Path, profile: Path) -> Iterator[Any]:
    """A page in headless chromium with a fresh profile, closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(chromium),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000},
        )
        context.set_default_timeout(60_000)
        try:
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()


@pytest.fixture
def browser_page(chromium: Path, tmp_path: Path) -> Iterator[Any]:
    """A page in headless chromium with a fresh profile."""
    with _headless_page(chromium, tmp_path / "chromium-profile") as page:
        yield page


@pytest.fixture(scope="module")
def module_page(chromium: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One page for a module's tests, so it signs in once; don't mix it with ``browser_page`` in one module."""
    with _headless_page(chromium, tmp_path_factory.mktemp("chromium-profile")) as page:
        yield page


@pytest.fixture
def sign_in(local_ui: LocalUI) -> Callable[[Any, str], None]:
    """``sign_in(page, path)``: open ``path`` of the shared stack and sign in on the login form Airflow shows first."""

    def sign_in(page: Any, path: str) -> None:
        page.goto(f"{local_ui.url}{path}")
        page.fill("input[name=username]", local_ui.username)
        page.fill("input[name=password]", local_ui.password)
        page.get_by_role("button", name="Sign in").click()

    return sign_in


@pytest.fixture(scope="session")
def screenshot() -> Callable[[Any, str], None]:
    """``screenshot(page, name)``: save what the page shows to ``tests/ui/artifacts/<name>``, animations finished."""

    def screenshot(page: Any, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / name), animations="disabled")

    return screenshot
