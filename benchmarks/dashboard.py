"""Budget-slider responsiveness of the dashboard (issue "Dashboard", item 5: <= 250 ms for ResNet-50).

Three measurements; the first two over every step of the budget slider:

* server: in-process, the Python work of one slider move - the engine's plans at the budget
  (engine.planner.make_plan), building the views' frames and updating every Bokeh/Panel model (no browser);
* browser (``--browser``): ``panel serve app.py`` in a subprocess and Debian's Chromium through
  Playwright; from the key press on the slider handle (in-page clock) to the last model change that update
  caused, then two animation frames so the canvases have painted. Panel's busy-indicator toggle, which
  Panel debounces by ~0.5 s whatever the app does, is not counted.
* sessions (``--sessions N``): N pages opened at once on one ``panel serve`` (loopback only, the serve
  options of ``--serve-args``), each page's load time to its summary and to its first view's plots, then
  rounds in which every page moves its slider at once (the same in-page clock); console errors and server
  tracebacks are counted, and CPU seconds split between the server, Chromium and the driver. Before that,
  the server alone: the same N page loads and slider rounds by a protocol-level client
  (engine.testing.serve.ProtocolPage), for each ``--alone-serve-args``; ``--baseline CHECKOUT`` repeats both
  for another checkout's app.py (a before/after on one machine at one time).

Results go to a JSON file (``--json``) and the Markdown report is written from it (``--report``).

Usage::

    python benchmarks/dashboard.py --profile assets/profiles/<h100 resnet50>.profile.json.gz --browser
    python benchmarks/dashboard.py --profile assets/profiles/h100-resnet50-b64-tf32-nchw-powerOfTwo.profile.json.gz \
        --browser --report benchmarks/reports/dashboard.md
    python benchmarks/dashboard.py --profile assets/profiles/h100-alexnet-b256-tf32-nchw-powerOfTwo.profile.json.gz \
        --screenshot docs/dashboard.png
    python benchmarks/dashboard.py --synthetic resnet50 --browser    # no measured profile needed
    git worktree add /tmp/before 94d9271   # the app before issue 25's page work, for --baseline
    ARGS="--unused-session-lifetime 60000"
    python benchmarks/dashboard.py --profile assets/profiles/h100-resnet50-b64-tf32-nchw-powerOfTwo.profile.json.gz \
        --browser --sessions 10 --baseline /tmp/before --alone-serve-args="$ARGS" \
        --alone-serve-args="--num-threads 4 $ARGS" --alone-serve-args="--num-procs 2 $ARGS" \
        --json benchmarks/reports/dashboard.json --report benchmarks/reports/dashboard.md

``--synthetic NET`` makes a SYNTHETIC profile (engine/testing/synthetic.py) and says so in every output.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.fileio import atomic_write  # noqa: E402
from engine.testing.serve import PanelServer, ProtocolPage  # noqa: E402

CHROMIUM = os.environ.get("UCUDNN_CHROMIUM", "/usr/bin/chromium")


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def stats(xs) -> dict:
    return {"n": len(xs), "median": statistics.median(xs), "p90": pct(xs, 90), "max": max(xs)}


def server_latency(profile_path: Path, repeats: int = 2) -> dict:
    import panel as pn
    from bokeh.document import Document
    from pyviz_comms import Comm

    from dashboard.jobs import JobRunner
    from dashboard.plans import plan_choice
    from dashboard.result import build_result
    from dashboard.state import PlannerState
    from dashboard.ui import Dashboard

    t0 = time.perf_counter()
    state = PlannerState(profiles={profile_path.name: profile_path})
    if state.result is None:
        raise SystemExit(f"no plan: {state.error}")
    analysis_s = time.perf_counter() - t0
    dash = Dashboard(state, gpu=(False, "benchmark"), runner=JobRunner())
    pn.panel(dash).get_root(Document(), comm=Comm())  # real Bokeh models, updated as on a page
    steps = list(range(len(dash.controls.steps)))  # slider positions
    evals, full = [], []
    for _ in range(repeats):
        for v in steps + steps[::-1]:
            t = time.perf_counter()
            build_result(
                state.analysis, state.policy, state.mode, dash.controls.steps[v], state.kernel, choose=plan_choice
            )  # uncached: the plans made afresh
            evals.append(1000 * (time.perf_counter() - t))
            t = time.perf_counter()
            dash.controls.slider.value = v
            full.append(1000 * (time.perf_counter() - t))
    a = state.analysis
    return {
        "analysis_s": analysis_s,
        "steps": len(steps),
        "kernels": len(a.kernels),
        "front_points": {p: len(ps.front.workspace) for p, ps in a.policies.items()},
        "timeline_pieces": len(state.result.timeline),
        "state": stats(evals),
        "views": stats(full),
        "scope": a.scope,
        "policy": state.policy,
        "mode": state.mode,
        "synthetic": a.profile.synthetic,
        "profile": a.profile.describe(),
    }


SERVE_ARGS = ["--unused-session-lifetime", "60000"]  # what app.py's docstring says


def serve(profile_path: Path, log: Path, serve_args: list[str] = SERVE_ARGS, root: Path = ROOT) -> PanelServer:
    try:
        return PanelServer(profile_path, log, serve_args, timeout=120, root=root)
    except RuntimeError as err:
        raise SystemExit(str(err)) from None


# In-page clock: a change of any Bokeh model stamps __last and, two animation frames later (the canvases
# have painted by then), __painted.
HOOK = """() => {
  window.__changes = 0; window.__last = 0; window.__painted = 0; window.__summary = 0;
  for (const d of Bokeh.documents) d.on_change((ev) => {
    if (ev.attr === "css_classes") return;   // Panel's busy indicator (debounced), not the app's views
    window.__changes += 1; window.__last = performance.now();
    if (ev.attr === "text" && String(ev.value).includes("summary-time")) window.__summary += 1;
    requestAnimationFrame(() => requestAnimationFrame(() => { window.__painted = performance.now(); }));
  });
  document.addEventListener("keydown", () => {
    window.__start = performance.now(); window.__changes = 0; window.__summary = 0;
  }, true);
}"""
SETTLED = "() => window.__changes > 0 && performance.now() - window.__last > 400"
ANSWERED = "() => window.__summary > 0 && performance.now() - window.__last > 400"  # the server's summary came
PAINTED = "() => [window.__last - window.__start, window.__painted - window.__start]"


FIRST_VIEW = ("ucd-pareto", "ucd-desirable", "ucd-workspace")  # the plots a page shows when it opens


def count_message(counter: list, frame) -> None:
    """Count a Bokeh message by its header frame (a message is a header, metadata, content and buffers)."""
    counter[0] += isinstance(frame, str) and '"msgtype"' in frame


def browser_latency(profile_path: Path, moves: int, screenshot: Path | None) -> dict:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        srv = serve(profile_path, Path(tmp) / "serve.log")
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                frames = [0]  # Bokeh messages from the server: one per held update, more when views split it
                page.on("websocket", lambda ws: ws.on("framereceived", lambda f: count_message(frames, f)))
                page.goto(srv.url)
                page.wait_for_selector("[data-testid=summary-time]", timeout=120_000)
                page.wait_for_timeout(1500)
                if screenshot:
                    screenshot.parent.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(screenshot))
                page.evaluate(HOOK)
                handle = page.locator(".noUi-handle").first
                handle.focus()
                last, painted, messages = [], [], []
                card = page.locator("[data-testid=summary-time] .s")
                for i in range(moves):
                    before = card.inner_text()
                    frames[0] = 0
                    handle.press("ArrowLeft" if (i // 8) % 2 == 0 else "ArrowRight")
                    deadline = time.monotonic() + 60  # the server's answer, not only the slider's own change
                    while card.inner_text() == before and time.monotonic() < deadline:
                        page.wait_for_timeout(10)
                    page.wait_for_function(SETTLED, timeout=20_000)
                    a, b = page.evaluate(PAINTED)
                    last.append(a)
                    painted.append(b)
                    messages.append(frames[0])
                page.wait_for_timeout(1500)  # Panel's trailing busy-indicator messages: closing mid-write
                browser.close()  # makes Tornado log a WebSocketClosedError traceback
        finally:
            srv.stop()
        if "Traceback" in srv.log():
            raise SystemExit(f"server error:\n{srv.log()}")
    return {"last_change": stats(last), "painted": stats(painted), "messages": stats(messages)}


async def _sessions(url: str, n: int, rounds: int, mark) -> dict:
    from playwright.async_api import async_playwright

    problems: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        pages = []
        for _ in range(n):
            ctx = await browser.new_context(viewport={"width": 1280, "height": 800})
            page = await ctx.new_page()
            page.on(
                "console",
                lambda m: (
                    problems.append(f"{m.text} {m.location.get('url', '')}".strip()) if m.type == "error" else None
                ),
            )
            page.on("pageerror", lambda e: problems.append(str(e)))
            pages.append(page)

        async def load(page):
            t = time.perf_counter()
            await page.goto(url, timeout=300_000)
            await page.wait_for_selector("[data-testid=summary-time]", timeout=180_000)
            summary = time.perf_counter() - t
            for plot in FIRST_VIEW:  # Bokeh draws a plot's canvas once the plot has its data and layout
                await page.wait_for_selector(f".{plot} canvas", state="attached", timeout=180_000)
            return summary, time.perf_counter() - t

        warm = await (await browser.new_context(viewport={"width": 1280, "height": 800})).new_page()
        await load(warm)  # the first page computes the shared analysis (as in server_alone): not counted
        await warm.context.close()
        mark()
        t0 = time.perf_counter()
        loads = await asyncio.gather(*(load(p) for p in pages))
        all_loaded = time.perf_counter() - t0
        mark()
        for page in pages:
            await page.evaluate(HOOK)
            await page.locator(".noUi-handle").first.focus()

        async def move(page, key):
            await page.keyboard.press(key)
            # the slider's own change is local: wait for the server's answer (a new summary), then for the page
            # to fall quiet, so a slow server is not mistaken for a settled page; polled inside the page, since
            # ten pages polled from here would take the CPUs the server and Chromium are measured on
            await page.wait_for_function(ANSWERED, timeout=120_000, polling=50)
            return (await page.evaluate(PAINTED))[0]

        moves = []
        for r in range(rounds):
            key = "ArrowLeft" if (r // 4) % 2 == 0 else "ArrowRight"
            moves += await asyncio.gather(*(move(p, key) for p in pages))
        mark()
        await asyncio.sleep(1.5)  # as in browser_latency: no page closed mid-write
        await browser.close()
    return {
        "sessions": n,
        "rounds": rounds,
        "load_s": stats([a for a, _ in loads]),
        "plots_s": stats([b for _, b in loads]),
        "all_loaded_s": all_loaded,
        "slider_ms": stats(moves),
        "console_errors": len(problems),
        "console_examples": problems[:3],
    }


def tree_cpu_s(root: int, exclude: int | None = None) -> dict[str, float]:
    """CPU seconds (user + system) of process ``root`` and its live descendants, less ``exclude``'s tree
    (Linux /proc), as {"chromium": Chromium's processes, "other": the rest}: who used the CPUs in a phase."""
    parent: dict[int, int] = {}
    cpu: dict[int, tuple[str, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                head, tail = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)
            except OSError:
                continue
            fields = tail.split()
            parent[int(d)] = int(fields[1])
            cpu[int(d)] = (head.split("(", 1)[1], (int(fields[11]) + int(fields[12])) / tick)

    def under(pid: int, top: int) -> bool:
        while pid > 1:
            if pid == top:
                return True
            pid = parent.get(pid, 0)
        return False

    out = {"chromium": 0.0, "other": 0.0}
    for pid, (name, seconds) in cpu.items():
        if under(pid, root) and not (exclude and under(pid, exclude)):
            out["chromium" if "chrom" in name.lower() else "other"] += seconds
    return out


def server_alone(profile_path: Path, n: int, rounds: int, serve_args: list[str], root: Path = ROOT) -> dict:
    """N page loads at once by a protocol-level client instead of Chromium pages (ProtocolPage), then rounds in
    which every page moves its budget slider by one step at once, to the server's new summary: the server's
    share of a page load and of a slider move, on the same CPUs but without Chromium's. The client's own CPU
    is reported beside the server's."""

    async def clients(url: str, rounds: int) -> dict:
        pages = [ProtocolPage() for _ in range(n)]
        try:
            cpu0, own0, t = sum(tree_cpu_s(srv.proc.pid).values()), time.process_time(), time.perf_counter()
            loads = await asyncio.gather(*(p.open(url) for p in pages))
            wall = time.perf_counter() - t
            cpu1, own1 = sum(tree_cpu_s(srv.proc.pid).values()), time.process_time()
            moves = []
            for r in range(rounds):  # as the Chromium pages' arrow keys: four steps down, four up, ...
                step = -1 if (r // 4) % 2 == 0 else 1
                ids = [p.find("Slider") for p in pages]
                moves += await asyncio.gather(
                    *(p.change(i, "value", p.models[i]["value"] + step) for p, i in zip(pages, ids))
                )
            cpu2, own2 = sum(tree_cpu_s(srv.proc.pid).values()), time.process_time()
        finally:
            for p in pages:
                p.close()
        return {
            "load_s": stats(loads),
            "slider_ms": stats([1000 * m for m in moves]) if moves else None,
            "received_bytes": statistics.median(p.received for p in pages),
            "all_s": wall,
            "server_cpu_s": cpu1 - cpu0,
            "client_cpu_s": own1 - own0,
            "slider_cpu_s": {"server": cpu2 - cpu1, "client": own2 - own1},
        }

    with tempfile.TemporaryDirectory() as tmp:
        srv = serve(profile_path, Path(tmp) / "serve.log", serve_args, root)
        try:
            asyncio.run(clients(srv.url, 0))  # warm-up (not counted): each process computes the shared analysis
            asyncio.run(clients(srv.url, 0))  # on its first page, and which process a page gets is the kernel's
            out = asyncio.run(clients(srv.url, rounds))
        finally:
            srv.stop()
        log = srv.log()
    return {
        "sessions": n,
        "pulled": n,
        **out,
        "rounds": rounds,
        "server_tracebacks": log.count("Traceback"),
        "serve_args": " ".join(serve_args),
        "app": app_label(root),
    }


def app_label(root: Path) -> str:
    """Which app.py was measured: this checkout's, or another's by its folder name and commit."""
    if root == ROOT:
        return "this checkout"
    import subprocess

    out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return " at commit ".join(filter(None, (root.name, out.stdout.strip())))  # a copy that is no checkout: its name


def sessions_latency(profile_path: Path, n: int, rounds: int, serve_args: list[str], root: Path = ROOT) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        srv = serve(profile_path, Path(tmp) / "serve.log", serve_args, root)
        try:
            marks = []

            def mark():
                here = tree_cpu_s(os.getpid(), srv.proc.pid)
                marks.append({"server": sum(tree_cpu_s(srv.proc.pid).values()), **here})

            mark()
            out = asyncio.run(_sessions(srv.url, n, rounds, mark))
        finally:
            srv.stop()
        log = srv.log()
    # CPU seconds per phase (page loads, slider rounds): the server's process tree, Chromium's processes, and
    # the rest of this benchmark's tree (Playwright's driver and this script)
    out["cpu_s"] = {  # marks: start, after the warm-up page, after the loads, after the slider rounds
        who: {"load": marks[2][who] - marks[1][who], "slider": marks[3][who] - marks[2][who]}
        for who in ("server", "chromium", "other")
    }
    out["server_tracebacks"] = log.count("Traceback")
    out["serve_args"] = " ".join(serve_args)
    out["app"] = app_label(root)
    return out


def report(server: dict, browser: dict | None, sessions: dict | None = None) -> str:
    sc = argparse.Namespace(**server["scope"]) if isinstance(server["scope"], dict) else server["scope"]
    tag = (
        "SYNTHETIC profile (engine/testing/synthetic.py), not measurements"
        if server["synthetic"]
        else "measured profile"
    )
    f = lambda s: f"{s['median']:.1f} / {s['p90']:.1f} / {s['max']:.1f}"
    lines = [
        "# Dashboard: budget-slider latency",
        "",
        f"Produced by `python benchmarks/dashboard.py` on {platform.node() or 'this machine'} "
        f"({os.cpu_count()} CPUs, Python {platform.python_version()}); "
        f"{server.get('date') or time.strftime('%Y-%m-%d')}"
        + (
            ". 1-minute load average at the start and end of the run (at the start: other jobs on this machine; at "
            "the end this run's own Chromium pages count too): "
            + " and ".join(f"{x:.1f}" for x in server["load_average"])
            if server.get("load_average")
            else ""
        )
        + ".",
        "",
        f"- profile: {tag}: {server['profile']}",
        f"- network: {sc.network}, mini-batch {sc.batch}, {sc.precision} {sc.layout}; policy {server['policy']}, "
        f"mode {server['mode']}; {server['kernels']} kernels; WD front points "
        + ", ".join(f"{p} {n}" for p, n in server["front_points"].items()),
        f"- {server['steps']} slider steps (4 per octave); the timeline has ~{server['timeline_pieces']} "
        f"micro-batch pieces",
        f"- one-off analysis (desirable sets + fronts for every policy): {server['analysis_s']:.2f} s",
        "",
        "| what (ms, median / p90 / max) | per slider move |",
        "|---|---|",
        f"| server: choose configurations + build every view's frame | {f(server['state'])} |",
        f"| server: the above + update every Bokeh/Panel model | {f(server['views'])} |",
    ]
    if browser:
        lines += [
            f"| browser: key press -> last view model updated | {f(browser['last_change'])} |",
            f"| browser: key press -> canvases painted | {f(browser['painted'])} |",
        ]
        if "messages" in browser:  # reports before issue 25 did not count them
            m = browser["messages"]
            lines.append(
                f"| browser: Bokeh messages from the server per move (count) | "
                f"{m['median']:g} / {m['p90']:g} / {m['max']:g} |"
            )
    if sessions:
        g = lambda s, k=1: f"{s['median'] * k:.1f} / {s['p90'] * k:.1f} / {s['max'] * k:.1f}"
        lines += ["", f"## {sessions['sessions']} concurrent sessions on one server"]
        runs = [sessions] + ([sessions["baseline"]] if sessions.get("baseline") else [])
        if "load_s" in sessions:  # not with --alone-only

            def row(what: str, key: str) -> str:
                return f"| {what} | " + " | ".join(g(r[key]) if key in r else "-" for r in runs) + " |"

            lines += [
                "",
                f"`panel serve app.py {sessions['serve_args']}`; after one page has warmed the shared analysis (not "
                f"counted), {sessions['sessions']} Chromium pages opened at once, then {sessions['rounds']} rounds in "
                "which every page moves its slider at the same time.",
                "",
                "| what (median / p90 / max) | " + " | ".join(r.get("app", "this checkout") for r in runs) + " |",
                "|---|" + "---|" * len(runs),
                row("page load to the summary (s)", "load_s"),
                row("page load to every plot of the first view drawn (s)", "plots_s"),
                row("slider move -> last view model updated (ms)", "slider_ms"),
                "| console errors / server tracebacks | "
                + " | ".join(f"{r['console_errors']} / {r['server_tracebacks']}" for r in runs)
                + " |",
            ]
        cpu = sessions.get("cpu_s")
        if cpu:  # reports before this split did not have it
            lines += [
                "",
                "Who used the CPUs (CPU seconds, user + system, over all pages):",
                "",
                "| phase | server | Chromium | Playwright driver and this script |",
                "|---|---|---|---|",
                *(
                    f"| {what}{label} | {c['server'][k]:.1f} | {c['chromium'][k]:.1f} | {c['other'][k]:.1f} |"
                    for label, c in [("", cpu)] + [(f" ({b['app']})", b["cpu_s"]) for b in runs[1:]]
                    for k, what in (("load", f"{sessions['sessions']} page loads"), ("slider", "slider rounds"))
                ),
            ]
        alone = sessions.get("server_alone")
        if isinstance(alone, dict):  # reports before issue 25's second pass: one bokeh.client run
            alone = None
        if alone:
            lines += [
                "",
                f"The server alone: {alone[0]['sessions']} page loads at once by a protocol-level client (no "
                "browser, engine.testing.serve.ProtocolPage): each GETs the page (the server runs app.py for "
                "the session and writes the HTML), pulls the document over the websocket (Bokeh's ACK and "
                "PULL-DOC-REQ), sends document_ready as BokehJS does once it has drawn a page, and waits for the "
                "message that brings the summary (app.py builds the dashboard then); then rounds in which every page "
                "moves its budget slider one step at once (the value change a browser sends), each timed to the "
                "server's new summary. Messages are parsed only for model ids and values; static assets "
                "(JavaScript, CSS) are not fetched. Two warm-up rounds of page loads first (every server "
                "process computes the shared analysis on its first page). A checkout other than this one is an "
                "earlier app.py measured the same way (`--baseline`).",
                "",
                "| app.py | panel serve options | page load, s (median / p90 / max) | all loaded, s | server CPU s "
                "(per page) | client CPU s | slider move, ms (median / p90 / max) | server CPU s per move | "
                "tracebacks |",
                "|---|---|---|---|---|---|---|---|---|",
                *(
                    f"| {a.get('app', 'this checkout')} | `{a['serve_args']}` | {g(a['load_s'])} | {a['all_s']:.1f} | "
                    f"{a['server_cpu_s']:.1f} ({a['server_cpu_s'] / a['sessions']:.2f}) | {a['client_cpu_s']:.1f} | "
                    + (
                        f"{g(a['slider_ms'])} | {a['slider_cpu_s']['server'] / a['slider_ms']['n']:.3f} | "
                        if a.get("slider_ms")
                        else "- | - | "
                    )
                    + f"{a['server_tracebacks']} |"
                    for a in alone
                ),
            ]
        lines += ["", "Targets: page load <= 6 s median, slider p90 <= 500 ms, no errors."]
    lines += [
        "",
        "Target: every view updated within 150 ms of a slider move for ResNet-50 b64 (median).",
        "",
        "How it is measured and what it includes:",
        "",
        "- A slider move reuses what was computed once per (profile, network, mini-batch, dtype, layout): "
        "every policy's desirable sets and exact WD network front (`dashboard.analysis.analyse`). The plans "
        "shown come from `engine.planner.make_plan`, the CLI's call: WR picks each kernel's fastest "
        "configuration within the limit by binary search in its desirable set, WD solves the 0-1 ILP over "
        "the aligned sets; the front only draws the curve.",
        "- The server row is in-process (no browser), over every slider step in both directions, twice.",
        "- The browser rows drive Debian's Chromium (software rendering, `--disable-gpu`) with the arrow keys on "
        "the slider handle against `panel serve app.py "
        + " ".join(SERVE_ARGS)
        + "`; the clock runs in the page, from the keydown to the "
        "last change of any Bokeh model that update caused (then two animation frames for 'painted'). The "
        "visible page holds the summary, the Pareto front, the desirable set and the workspace division; the "
        "timeline, plan table and memory tabs are drawn when opened (Panel's dynamic tabs) and redrawn only while "
        "open: a slider move marks them stale, opening one draws it once from the current state. "
        "The messages row counts the Bokeh messages the page received from the keydown until it fell quiet "
        "(app.py serves no busy indicator): a move's view updates should arrive together.",
        "- Chromium, the server and the test driver share this machine's CPUs (and other sessions may be using "
        "them too), so the tail (max) is noisy; the median is the figure to compare with the target.",
        "- A served page first shows a header and 'Loading...'; app.py builds the dashboard once the browser has "
        "loaded that (Panel's onload), one page at a time in the order they loaded (dashboard/pages.py). 'Page "
        "load' runs from the request to the summary on the page; 'every plot drawn' until the first view's three "
        "plots have their canvases.",
        "- With several Chromium pages the CPU table separates the server's CPU seconds from Chromium's: on this "
        "machine they compete for the same two CPUs, where each visitor's own machine would run its browser. The "
        "server-alone run is the server's share without them.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--profile", type=Path, help="profile file (e.g. the bundled H100 ResNet-50 one)")
    src.add_argument("--synthetic", metavar="NET", help="make a SYNTHETIC profile of this zoo network")
    ap.add_argument("--batch", type=int, default=None, help="with --synthetic: mini-batch (default: the zoo's)")
    ap.add_argument("--policy", default="powerOfTwo", help="with --synthetic: profiled policy")
    ap.add_argument("--browser", action="store_true", help="also measure in Chromium against panel serve")
    ap.add_argument("--moves", type=int, default=24, help="slider moves measured in the browser")
    ap.add_argument("--screenshot", type=Path, help="save a 1280x800 screenshot of the served page here")
    ap.add_argument("--sessions", type=int, default=0, help="also open this many pages at once on one server")
    ap.add_argument("--rounds", type=int, default=12, help="with --sessions: slider moves per page")
    ap.add_argument("--serve-args", default=" ".join(SERVE_ARGS), help="panel serve options for --sessions")
    ap.add_argument(
        "--alone-serve-args",
        action="append",
        help="with --sessions: panel serve options of a server-alone run (repeatable; default: --serve-args)",
    )
    ap.add_argument(
        "--baseline",
        type=Path,
        metavar="CHECKOUT",
        help="with --sessions: the same measurements of another checkout's app.py (git worktree add DIR COMMIT)",
    )
    ap.add_argument("--alone-only", action="store_true", help="with --sessions: no Chromium pages, the server alone")
    ap.add_argument("--json", type=Path, help="write the results (JSON) here")
    ap.add_argument("--from-json", type=Path, help="only write the report from an earlier --json")
    ap.add_argument("--report", type=Path, help="write the Markdown report here")
    args = ap.parse_args(argv)
    if args.from_json:
        res = json.loads(args.from_json.read_text())
        text = report(res["server"], res.get("browser"), res.get("sessions"))
        if args.report:
            atomic_write(args.report, text)
        print(text)
        return 0
    if not (args.profile or args.synthetic):
        ap.error("one of --profile, --synthetic or --from-json is required")
    with tempfile.TemporaryDirectory() as tmp:
        path = args.profile
        if args.synthetic:
            from engine.zoo import DEFAULT_BATCH
            from engine.testing.synthetic import synthetic_profile

            batch = args.batch or DEFAULT_BATCH[args.synthetic]
            path = Path(tmp) / f"SYNTHETIC-{args.synthetic}-b{batch}.profile.json.gz"
            synthetic_profile(args.synthetic, batch, args.policy).save(path)
        load_before = os.getloadavg()[0]
        server = server_latency(path)
        browser = browser_latency(path, args.moves, args.screenshot) if args.browser or args.screenshot else None
        sessions = None
        if args.sessions:
            alone = [
                server_alone(path, args.sessions, args.rounds, a.split())
                for a in args.alone_serve_args or [args.serve_args]
            ]
            if args.baseline:  # the same client and options against another checkout's app.py
                alone.append(server_alone(path, args.sessions, args.rounds, args.serve_args.split(), args.baseline))
            sessions = (
                {"sessions": args.sessions, "serve_args": args.serve_args}
                if args.alone_only
                else sessions_latency(path, args.sessions, args.rounds, args.serve_args.split())
            )
            if args.baseline and not args.alone_only:
                sessions["baseline"] = sessions_latency(
                    path, args.sessions, args.rounds, args.serve_args.split(), args.baseline
                )
            sessions["server_alone"] = alone
    server["scope"] = vars(server["scope"])
    server["load_average"] = [load_before, os.getloadavg()[0]]  # other jobs on this machine, start and end
    server["date"] = time.strftime("%Y-%m-%d")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(
            args.json, json.dumps({"server": server, "browser": browser, "sessions": sessions}, indent=1, default=str)
        )
    text = report(server, browser, sessions)
    print(text)
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(args.report, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
