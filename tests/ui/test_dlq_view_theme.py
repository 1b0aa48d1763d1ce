"""The DLQ view in Airflow's look: dark or light as the user picks it in Airflow, at 1280 px and on a narrow window.

Headless Debian chromium (through Playwright) on the local Airflow ``make ui`` starts, sharing
the session's embedded broker. The user picks *Dark Mode* or *Light Mode* in Airflow's own
user menu (or Airflow has it stored from an earlier visit), then opens Browse → Dead letters
and a replay run's *Replay summary* tab (also on its own); the tests read the colours the browser painted
(computed styles, turned into sRGB by a canvas) and compare them with Airflow's own around
the iframe. The system's preference is set to the opposite mode, so a page that followed the
system instead of Airflow fails. Screenshots go to ``tests/ui/artifacts/``; the docs show them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest

from airflow_kerr.local.ui import LocalUI, seed_dead_letters

pytestmark = [pytest.mark.ui, pytest.mark.airflow, pytest.mark.timeout(420)]

DEAD_LETTERS = 12
RUN_TIMEOUT_S = 180.0
#: How long a wait for the page lasts at most: the UI is slow on a busy 2-core machine.
WAIT_MS = 60_000
WIDE, NARROW = 1280, 420

#: What the page in a frame looks like: its colours as painted (a 1x1 canvas turns any CSS colour, oklch
#: included, into sRGB), its font, its colour mode, and whether it scrolls sideways.
LOOK_JS = """(body) => {
  const paint = (colour) => {
    const canvas = document.createElement("canvas");
    canvas.width = canvas.height = 1;
    const context = canvas.getContext("2d");
    context.fillStyle = colour;
    context.fillRect(0, 0, 1, 1);
    return Array.from(context.getImageData(0, 0, 1, 1).data.slice(0, 3));
  };
  const style = getComputedStyle(body);
  const page = document.scrollingElement;
  return {
    background: paint(style.backgroundColor),
    foreground: paint(style.color),
    font: style.fontFamily,
    mode: document.documentElement.classList.contains("dark") ? "dark" : "light",
    scroll_width: page.scrollWidth,
    client_width: page.clientWidth,
  };
}"""

#: Airflow's own look around the iframe: the background the frame sits on and Airflow's text colour and font.
AIRFLOW_LOOK_JS = """(frame) => {
  const paint = (colour) => {
    const canvas = document.createElement("canvas");
    canvas.width = canvas.height = 1;
    const context = canvas.getContext("2d");
    context.fillStyle = colour;
    context.fillRect(0, 0, 1, 1);
    return Array.from(context.getImageData(0, 0, 1, 1).data.slice(0, 3));
  };
  let node = frame.parentElement;
  let background = "";
  while (node) {
    const colour = getComputedStyle(node).backgroundColor;
    if (colour !== "transparent" && !/^rgba\\(.*,\\s*0\\)$/.test(colour)) { background = colour; break; }
    node = node.parentElement;
  }
  const html = getComputedStyle(document.documentElement);
  const font = getComputedStyle(document.body).fontFamily;
  return { background: paint(background), foreground: paint(html.color), font };
}"""


def _luminance(rgb: list[int]) -> float:
    """WCAG relative luminance of an sRGB colour: 0 is black, 1 is white."""
    linear = [c / 255 / 12.92 if c <= 10 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _same_colour(ours: list[int], airflows: list[int]) -> bool:
    """The same colour, allowing one step of rounding per channel."""
    return all(abs(a - b) <= 1 for a, b in zip(ours, airflows, strict=True))


def _choose_appearance(page: Any, mode: str) -> None:
    """Pick ``mode`` ("Dark Mode", "Light Mode") in Airflow's user menu as a person does; wait till Airflow shows it."""
    page.get_by_role("button", name="User").click()
    # The submenu opens on hover, after a delay, and a click on its item toggles it: a click could close what the
    # hover just opened. Hover, then ArrowRight, opens it either way (on an open submenu it only moves the focus in).
    page.get_by_role("menuitem", name="Appearance").hover()
    page.keyboard.press("ArrowRight")
    page.get_by_role("menuitemradio", name=mode).click()
    wanted = "dark" if mode == "Dark Mode" else "light"
    page.wait_for_function(f"document.documentElement.classList.contains({wanted!r})", timeout=WAIT_MS)
    page.keyboard.press("Escape")


def _view_frame(page: Any, path: str) -> tuple[Any, Any]:
    """The iframe element Airflow shows the plugin's ``path`` in, and its frame, once the page's script ran."""
    iframe = page.locator(f"iframe[src*='{path}']").first
    iframe.wait_for(timeout=WAIT_MS)
    frame = iframe.element_handle().content_frame()
    frame.wait_for_function("document.documentElement.classList.length > 0", timeout=WAIT_MS)
    return iframe, frame


def _check_page(frame: Any, mode: str) -> dict[str, Any]:
    """Wait until the page in ``frame`` shows ``mode``; check it has that mode's colours and never scrolls sideways."""
    frame.wait_for_function(f"document.documentElement.classList.contains({mode!r})", timeout=WAIT_MS)
    look: dict[str, Any] = frame.locator("body").evaluate(LOOK_JS)
    assert look["mode"] == mode, look
    background, foreground = _luminance(look["background"]), _luminance(look["foreground"])
    if mode == "dark":
        assert background < 0.1 and foreground > 0.6, f"not a dark page: {look}"
    else:
        assert background > 0.8 and foreground < 0.1, f"not a light page: {look}"
    assert look["scroll_width"] <= look["client_width"], f"the page scrolls sideways: {look}"
    return look


def _check_look(iframe: Any, frame: Any, mode: str) -> dict[str, Any]:
    """Check the view shows ``mode`` (see :func:`_check_page`) in Airflow's own colours and font around it."""
    look = _check_page(frame, mode)
    airflow = iframe.evaluate(AIRFLOW_LOOK_JS)
    assert _same_colour(look["background"], airflow["background"]), f"the view {look} on Airflow's {airflow}"
    assert _same_colour(look["foreground"], airflow["foreground"]), f"the view {look} in Airflow's {airflow}"
    assert look["font"] == airflow["font"], f"the view's font {look['font']!r}, Airflow's {airflow['font']!r}"
    return look


def _open_the_dlq(page: Any, dlq: str) -> tuple[Any, Any]:
    """Browse → Dead letters, then one DLQ, with its counts and newest dead letters shown."""
    from playwright.sync_api import expect

    page.get_by_role("button", name="Browse").click()
    page.get_by_role("menuitem", name="Dead letters").click()
    page.wait_for_url(re.compile(r".*/plugin/kerr-dead-letters(/.*)?$"))
    iframe, frame = _view_frame(page, "/kerr/dead-letters")
    view = page.frame_locator("iframe[src*='/kerr/dead-letters']").first
    view.locator(f"#topics tr[data-topic='{dlq}']").click()
    expect(view.locator("#progress")).to_have_text(f"All {DEAD_LETTERS} records counted.", timeout=WAIT_MS)
    expect(view.locator("#samples article").first).to_be_visible(timeout=WAIT_MS)
    expect(view.locator("#timeline rect").first).to_be_visible(timeout=WAIT_MS)
    return iframe, frame


def test_the_view_follows_the_mode_picked_in_airflow(
    local_ui: LocalUI,
    browser_page: Any,
    kafka_bootstrap: str,
    sign_in: Callable[[Any, str], None],
    screenshot: Callable[[Any, str], None],
) -> None:
    """Dark Mode in Airflow's menu darkens the view; Light Mode, picked while it is open, lightens it at once."""
    suffix = uuid.uuid4().hex[:8]
    dlq = f"ui-theme-{suffix}.dlq"
    seed_dead_letters(kafka_bootstrap, dlq, source_topic=f"ui-theme-{suffix}", count=DEAD_LETTERS)
    page = browser_page
    try:
        page.set_viewport_size({"width": WIDE, "height": 900})
        page.emulate_media(color_scheme="light")  # the system says light; Airflow is told dark
        sign_in(page, "/")
        _choose_appearance(page, "Dark Mode")
        iframe, frame = _open_the_dlq(page, dlq)
        _check_look(iframe, frame, "dark")
        screenshot(page, "dlq_view_dark.png")

        page.emulate_media(color_scheme="dark")  # now the other way round, without reloading the view
        _choose_appearance(page, "Light Mode")
        _check_look(iframe, frame, "light")
        screenshot(page, "dlq_view_light.png")
    except BaseException:
        screenshot(page, "dlq_view_theme_failure.png")
        raise


def test_the_view_fits_a_1280_px_and_a_narrow_window(
    local_ui: LocalUI,
    browser_page: Any,
    kafka_bootstrap: str,
    sign_in: Callable[[Any, str], None],
    screenshot: Callable[[Any, str], None],
) -> None:
    """At 1280 px and at 420 px the view never scrolls sideways, its replay form included; wide tables scroll inside."""
    from playwright.sync_api import expect

    suffix = uuid.uuid4().hex[:8]
    dlq = f"ui-narrow-{suffix}.dlq"
    seed_dead_letters(kafka_bootstrap, dlq, source_topic=f"ui-narrow-{suffix}", count=DEAD_LETTERS)
    page = browser_page
    try:
        page.set_viewport_size({"width": WIDE, "height": 900})
        sign_in(page, "/")
        iframe, frame = _open_the_dlq(page, dlq)
        _check_look(iframe, frame, "light")

        page.set_viewport_size({"width": NARROW, "height": 900})
        frame.wait_for_function(f"window.innerWidth < {NARROW}", timeout=WAIT_MS)
        look = _check_look(iframe, frame, "light")
        assert look["client_width"] < NARROW, look
        view = page.frame_locator("iframe[src*='/kerr/dead-letters']").first
        expect(view.locator("#samples article").first).to_be_visible(timeout=WAIT_MS)
        screenshot(page, "dlq_view_narrow.png")
        view.get_by_role("button", name="Replay this selection…").click()
        expect(view.locator("#replay-dialog [name=dlq_topic]")).to_have_value(dlq, timeout=WAIT_MS)
        dialog = view.locator("#replay-dialog").evaluate(
            "(d) => ({ right: d.getBoundingClientRect().right, width: document.documentElement.clientWidth,"
            " scroll: document.scrollingElement.scrollWidth })"
        )
        assert dialog["right"] <= dialog["width"] and dialog["scroll"] <= dialog["width"], dialog
    except BaseException:
        screenshot(page, "dlq_view_narrow_failure.png")
        raise


def test_the_replay_summary_tab_takes_the_stored_dark_mode(
    local_ui: LocalUI,
    browser_page: Any,
    kafka_bootstrap: str,
    sign_in: Callable[[Any, str], None],
    screenshot: Callable[[Any, str], None],
) -> None:
    """Dark mode Airflow stored earlier darkens a run's Replay summary tab, and its page alone at 420 px."""
    from playwright.sync_api import expect

    suffix = uuid.uuid4().hex[:8]
    dlq = f"ui-summary-{suffix}.dlq"
    seed_dead_letters(kafka_bootstrap, dlq, source_topic=f"ui-summary-{suffix}", count=DEAD_LETTERS)
    conf = {"dlq_topic": dlq, "replay_group": f"kerr-replay.ui-summary-{suffix}", "dry_run": True}
    with local_ui.api() as api:
        run = api.post("/dags/dlq_replay/dagRuns", json={"logical_date": None, "conf": conf}).raise_for_status().json()
    local_ui.wait_for_run("dlq_replay", run["dag_run_id"], "replay", RUN_TIMEOUT_S)

    page = browser_page
    try:
        page.set_viewport_size({"width": WIDE, "height": 900})
        page.emulate_media(color_scheme="light")
        sign_in(page, "/")
        page.get_by_role("button", name="Browse").wait_for(timeout=WAIT_MS)  # signed in: Airflow's menu shows
        # What Airflow's Appearance menu stores (next-themes' key), as left by an earlier visit.
        page.evaluate("localStorage.setItem('theme', 'dark')")
        page.goto(f"{local_ui.url}/dags/dlq_replay/runs/{run['dag_run_id']}/plugin/kerr-replay-summary")
        iframe, frame = _view_frame(page, "/kerr/replay-summary")
        tab = page.frame_locator("iframe[src*='/kerr/replay-summary']").first
        expect(tab.get_by_role("heading", level=2)).to_contain_text("dry run", timeout=WAIT_MS)
        expect(tab.locator("tbody tr").first).to_contain_text("would", timeout=WAIT_MS)
        _check_look(iframe, frame, "dark")
        screenshot(page, "replay_summary_dark.png")

        # Airflow's run page does not fit 420 px itself; the tab's page, opened on its own there, does, and
        # takes the stored mode with no Airflow page around it.
        page.set_viewport_size({"width": NARROW, "height": 900})
        page.goto(f"{local_ui.url}/kerr/replay-summary?dag_id=dlq_replay&run_id={quote(run['dag_run_id'])}")
        expect(page.locator("tbody tr").first).to_contain_text("would", timeout=WAIT_MS)
        look = _check_page(page.main_frame, "dark")
        assert look["client_width"] <= NARROW, look
        screenshot(page, "replay_summary_narrow.png")
    except BaseException:
        screenshot(page, "replay_summary_dark_failure.png")
        raise
