"""Browser tests: Playwright driving Debian's Chromium against a real ``panel serve app.py`` subprocess.

``server`` is given one SYNTHETIC profile through UCUDNN_PROFILE (engine/testing/synthetic.py);
``bundled_server`` serves the real bundled profiles only. Every test fails on an error or warning in the
browser console, on a request that leaves this machine (assets must be served locally) and on a Traceback
or an ERROR line in the server's output: server-side errors in callbacks reach neither the console nor
pytest otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from engine.testing.serve import PanelServer

CHROMIUM = os.environ.get("UCUDNN_CHROMIUM", "/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _why_not() -> str | None:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (install Debian's chromium or set UCUDNN_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _why_not()
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.ui)
            # under pytest-xdist (--dist loadgroup) a module's tests stay on one worker: one server and browser each
            item.add_marker(pytest.mark.xdist_group(Path(str(item.fspath)).stem))
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


class Server(PanelServer):
    """The app as the README serves it (no websocket message limit: uploads arrive in chunks)."""

    def __init__(self, profile: Path | None, log_path: Path, options=("--num-threads", "2")):
        super().__init__(profile, log_path, list(options), timeout=90)


@pytest.fixture(scope="module")
def synthetic_profile_file(tmp_path_factory):
    from engine.testing.synthetic import synthetic_profile

    path = tmp_path_factory.mktemp("ui-profiles") / "SYNTHETIC-alexnet-b32.profile.json.gz"
    return synthetic_profile("alexnet", 32, "powerOfTwo").save(path)  # SYNTHETIC


SERVER_PROBLEM = re.compile(r"Traceback|^ERROR|^WARNING|\bERROR:|\bWARNING:", re.M)


def server_problems(log: str) -> list[str]:
    """Tracebacks and ERROR/WARNING lines of the server's log (Tornado and Bokeh log that way)."""
    return [line for line in log.splitlines() if SERVER_PROBLEM.search(line)]


@pytest.fixture(scope="module")
def server(synthetic_profile_file, tmp_path_factory):
    srv = Server(synthetic_profile_file, tmp_path_factory.mktemp("ui-server") / "panel-serve.log")
    yield srv
    srv.stop()
    assert not server_problems(srv.log()), srv.log()


@pytest.fixture(scope="module")
def plain_server(synthetic_profile_file, tmp_path_factory):
    """Served as the README says: no --num-threads (Panel runs widget events with the document unlocked)."""
    srv = Server(synthetic_profile_file, tmp_path_factory.mktemp("ui-plain") / "panel-serve.log", options=())
    yield srv
    srv.stop()
    assert not server_problems(srv.log()), srv.log()


@pytest.fixture(scope="module")
def bundled_server(tmp_path_factory):
    """The bundled (measured) profiles only, as a new user's ``panel serve app.py`` offers them (with
    --num-threads 2, like ``server``: the app turns Panel's pool off, dashboard/threads.py)."""
    srv = Server(None, tmp_path_factory.mktemp("ui-bundled") / "panel-serve.log")
    yield srv
    srv.stop()
    assert not server_problems(srv.log()), srv.log()


@pytest.fixture(scope="module")
def bundled_plain_server(tmp_path_factory):
    """The bundled profiles served exactly as the README says: no --num-threads."""
    srv = Server(None, tmp_path_factory.mktemp("ui-bundled-plain") / "panel-serve.log", options=())
    yield srv
    srv.stop()
    assert not server_problems(srv.log()), srv.log()


@pytest.fixture(scope="module")
def ui_browser():
    """A module-scoped Playwright session (closed before other modules run their own event loops)."""
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    b = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
    yield b
    b.close()
    pw.stop()


IGNORED_CONSOLE = re.compile(r"favicon")
LOCAL = re.compile(r"^(https?|wss?)://(localhost|127\.0\.0\.1)(:\d+)?/|^(data|blob|about):")


def open_page(ui_browser, srv):
    """A 1280x800 page on ``srv``; returns (page, problems): console errors and warnings, page errors and
    requests to anywhere but the server, as they come."""
    context = ui_browser.new_context(viewport={"width": 1280, "height": 800}, accept_downloads=True)
    pg = context.new_page()
    problems: list[str] = []

    def console(m):
        if m.type in ("error", "warning") and not IGNORED_CONSOLE.search(m.location.get("url", "") + m.text):
            problems.append(f"console {m.type}: {m.text}")

    pg.on("console", console)
    pg.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    pg.on("request", lambda r: None if LOCAL.match(r.url) else problems.append(f"remote request: {r.url}"))
    pg.last_frame = time.monotonic()  # when the server last wrote to the page's websocket

    def stamp(_frame):
        pg.last_frame = time.monotonic()

    pg.on("websocket", lambda ws: ws.on("framereceived", stamp))
    pg.goto(srv.url)
    pg.wait_for_selector("[data-testid=summary-time]", timeout=90_000)
    return pg, problems


def close_page(pg, problems, srv, quiet: float = 0.9, timeout: float = 30.0):
    """Close once the server has written nothing for ``quiet`` seconds: the last update's trailing messages
    (Panel's busy indicator clears ~0.5 s later; a burst of rapid actions on a loaded host takes longer) must
    reach the page, as closing mid-write makes Tornado log a harmless WebSocketClosedError traceback."""
    deadline = time.monotonic() + timeout
    while time.monotonic() - pg.last_frame < quiet and time.monotonic() < deadline:
        pg.wait_for_timeout(100)
    pg.context.close()
    assert not problems, problems
    assert not server_problems(srv.log()), srv.log()


def checked_page(ui_browser, srv):
    """A page on ``srv`` (``page.problems``: what the browser reported so far); after the test, no console
    problem, remote request or server Traceback."""
    pg, problems = open_page(ui_browser, srv)
    pg.problems = problems
    yield pg
    close_page(pg, problems, srv)


@pytest.fixture
def app_page(ui_browser, server):
    """A page on the SYNTHETIC server."""
    yield from checked_page(ui_browser, server)


@pytest.fixture
def bundled_page(ui_browser, bundled_server):
    """A page on the bundled profiles' server."""
    yield from checked_page(ui_browser, bundled_server)


@pytest.fixture
def bundled_plain_page(ui_browser, bundled_plain_server):
    """A page on the bundled profiles served without --num-threads."""
    yield from checked_page(ui_browser, bundled_plain_server)


@pytest.fixture
def plain_page(ui_browser, plain_server):
    """A page on the SYNTHETIC server without --num-threads."""
    yield from checked_page(ui_browser, plain_server)
