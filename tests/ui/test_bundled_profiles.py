"""The served dashboard on the real bundled profiles (measured on an H100 and an H200), in a real browser.

A covering walk opens every bundled profile and switches along a path and back, so each switch of the path
runs in both directions, including the sequences that once tore the page (tf32 ``all`` -> fp16, ResNet-50 ->
AlexNet ``all`` -> VGG-16). After every switch the summary and the plots must name the chosen profile's GPU
and scope; the fixtures fail the test on any console error or warning, any request that leaves the
machine, and any Traceback or ERROR/WARNING line in the server's log.
"""

from __future__ import annotations

import random
import re
import time

import pytest

from engine.profile import bundled_profiles

pytestmark = pytest.mark.ui

BUNDLED = sorted(bundled_profiles())
DEFAULT = "h100-alexnet-b256-tf32-nchw-powerOfTwo"
PATH = [
    "h100-alexnet-b256-tf32-nchw-all",
    "h100-alexnet-b256-fp16-nhwc-powerOfTwo",
    "h100-resnet50-b64-tf32-nchw-powerOfTwo",
    "h100-alexnet-b256-tf32-nchw-all",
    "h100-vgg16-b64-tf32-nchw-powerOfTwo",
    "h100-resnet18-b128-tf32-nchw-powerOfTwo",
    "h200-resnet50-b64-fp16-nhwc-powerOfTwo",
    "h100-densenet40-b256-tf32-nchw-powerOfTwo",
    "h100-googlenet-b128-tf32-nchw-powerOfTwo",
    "h200-alexnet-b256-tf32-nchw-powerOfTwo",
    "h100-resnet50-b32-fp16-nhwc-powerOfTwo",
    "h100-vgg16-b64-fp16-nhwc-powerOfTwo",
    "h200-alexnet-b256-fp16-nhwc-powerOfTwo",
    "h100-resnet50-b32-tf32-nchw-powerOfTwo",
    "h200-resnet50-b64-tf32-nchw-powerOfTwo",
    "h200-vgg16-b64-tf32-nchw-powerOfTwo",
    "h200-vgg16-b64-fp16-nhwc-powerOfTwo",
    "h100-resnet50-b64-fp16-nhwc-powerOfTwo",
]
WALK = PATH + PATH[-2::-1] + [DEFAULT]  # there and back: every step of the path in both directions

# Titles of the Bokeh figures the views draw, read from the page's own document (what the canvas shows).
TITLES_JS = """() => {
  const out = {};
  for (const doc of window.Bokeh.documents) {
    for (const m of doc.all_models) {
      const cls = m.css_classes || [];
      if (m.title != null && m.title.text !== undefined)
        for (const c of cls) if (c.startsWith("ucd-")) out[c] = m.title.text;
    }
  }
  return out;
}"""


def expected(name: str) -> dict:
    """What a bundled profile's name says: ``h100-resnet50-b64-tf32-nchw-powerOfTwo``."""
    gpu, net, batch, dtype, layout, policy = name.split("-")
    return {
        "gpu": gpu.upper(),
        "network": net,
        "batch": int(batch[1:]),
        "dtype": dtype,
        "layout": layout.upper(),
        "policy": policy,
    }


def scope_line(e: dict) -> str:
    return f"{e['network']} B={e['batch']}, {e['dtype']}, {e['layout']}"


def shown(page) -> tuple[str, dict]:
    return page.locator("[data-testid=summary-scope]").inner_text(), page.evaluate(TITLES_JS)


def veiled(page) -> bool:
    """Whether the busy veil (dashboard/views/busy.py) covers the views."""
    return page.locator("[data-testid=busy]").is_visible()


def wait_for_profile(page, name: str, timeout: float = 90.0) -> None:
    """Until the summary and every plot show ``name``'s GPU, scope and the policy it was measured for (no two
    neighbours on the walk agree on all of them; first analyses take seconds)."""
    e = expected(name)
    deadline = time.monotonic() + timeout
    while True:
        text, titles = shown(page)
        policy = page.locator("[data-testid=summary-time] .s").inner_text()
        ok = (
            e["gpu"] in text
            and text.endswith(scope_line(e))
            and f", {e['policy']}, " in policy
            and titles.get("ucd-desirable", "").endswith(f"({e['policy']})")
            and scope_line(e).replace(" B=", ", B=") in titles.get("ucd-pareto", "")
            and titles.get("ucd-desirable", "").startswith("Desirable set of")
        )
        if ok:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}: the page shows {text!r}, {titles}")
        page.wait_for_timeout(100)


def test_every_bundled_profile_opens_and_every_switch_shows_it(bundled_page):
    page = bundled_page
    assert set(WALK) == set(BUNDLED), "the walk must open every bundled profile"
    wait_for_profile(page, DEFAULT)
    select = page.get_by_label("Profile")
    for name in WALK:
        select.select_option(name)
        wait_for_profile(page, name)
        e = expected(name)
        # the controls agree with the snapshot the views draw
        for label, value in (
            ("Network", e["network"]),
            ("Mini-batch size", str(e["batch"])),
            ("Data type", e["dtype"]),
            ("Layout", e["layout"]),
        ):
            assert page.get_by_label(label, exact=True).input_value() == value, (name, label)
        assert page.get_by_text("Sum over ").first.is_visible()
        wait_text(page, lambda: str(veiled(page)), "^False$", timeout=10)  # lifted once the switch is answered
        assert not page.problems, (name, page.problems)


# In one task of the page's own script: a choice as the browser makes it, then whether the veil is up (the
# server's answer cannot arrive before the task ends, however quickly it comes).
CHOOSE_JS = """([select, veil, value]) => {
  select.value = value;
  select.dispatchEvent(new Event("input", {bubbles: true, composed: true}));
  select.dispatchEvent(new Event("change", {bubbles: true}));
  return veil.checkVisibility();
}"""
CLICK_JS = "([button, veil]) => { button.click(); return veil.checkVisibility(); }"


def engine_set(page, name: str):
    """The engine-set button ``name`` (the policy buttons offer an "all" too)."""
    return page.locator(".bk-btn-group").filter(has_text="heuristics").get_by_role("button", name=name, exact=True)


def test_a_slow_choice_veils_the_views_until_the_page_answers(bundled_page):
    """The first switch to AlexNet's engine sweep (6,105 measured rows) and to another engine set takes the server
    seconds, in which the cards still showed the last profile's numbers: the browser veils the views at once and
    the server's answer lifts the veil. A click on the engine set already chosen sends nothing and veils
    nothing; a budget move is quick and veils nothing."""
    page = bundled_page
    wait_for_profile(page, DEFAULT)
    veil = page.locator("[data-testid=busy]").element_handle()
    assert not veiled(page)
    active = engine_set(page, "all").element_handle()
    assert not page.evaluate(CLICK_JS, [active, veil])
    name = "h100-alexnet-b256-tf32-nchw-all"
    select = page.get_by_label("Profile").element_handle()
    assert page.evaluate(CHOOSE_JS, [select, veil, name])
    wait_for_profile(page, name)
    wait_text(page, lambda: str(veiled(page)), "^False$")
    heuristics = engine_set(page, "heuristics").element_handle()
    assert page.evaluate(CLICK_JS, [heuristics, veil])
    wait_text(page, lambda: str(veiled(page)), "^False$")
    assert "bk-active" in engine_set(page, "heuristics").get_attribute("class")
    slider = page.get_by_role("slider").first
    slider.focus()
    slider.press("ArrowLeft")
    assert not veiled(page)
    engine_set(page, "all").click()
    wait_text(page, lambda: str(veiled(page)), "^False$")
    assert not page.problems, page.problems


def test_choices_made_while_the_page_switches_profile_end_as_the_views_show(bundled_page):
    """A QA walk: the AlexNet engine-sweep profile, then ResNet-50 and, before the page has answered, a policy
    click and Mini-batch 8 from the old options. The page took 8 (the views showed B=8), but the browser, which
    received the page's own batch (64) after sending 8, kept showing 64 for good. Each control must end showing
    what the views use."""
    page = bundled_page
    select = page.get_by_label("Profile")
    select.select_option("h100-alexnet-b256-tf32-nchw-all")
    wait_for_profile(page, "h100-alexnet-b256-tf32-nchw-all")
    for _ in range(2):
        select.select_option("h200-resnet50-b64-tf32-nchw-powerOfTwo")
        page.locator(".bk-btn-group").filter(has_text="powerOfTwo").get_by_role("button", name="undivided").click()
        page.get_by_label("Mini-batch size", exact=True).select_option("8")
        wait_text(page, lambda: str(veiled(page)), "^False$")
        page.wait_for_timeout(1500)  # the page's last messages
        scope = page.locator("[data-testid=summary-scope]").inner_text()
        batch = re.search(r"B=(\d+)", scope).group(1)
        assert page.get_by_label("Mini-batch size", exact=True).input_value() == batch, scope
        select.select_option("h100-alexnet-b256-tf32-nchw-all")
        wait_for_profile(page, "h100-alexnet-b256-tf32-nchw-all")
    assert not page.problems, page.problems


def budget_card(page) -> str:
    return page.locator("[data-testid=summary-time] .s").inner_text()


def wait_text(page, read, pattern: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = read()
        if re.search(pattern, text):
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"{pattern!r} not in {text!r}")
        page.wait_for_timeout(50)


def test_controls_tabs_and_compare_on_a_measured_profile(bundled_page):
    """ResNet-50 b64 (H100): a typed budget is kept exactly and shown the same everywhere, WR <-> WD comes
    back to it, engine sets keep it, each tab draws, Compare with shows the H200, capacities agree."""
    page = bundled_page
    name = "h100-resnet50-b64-tf32-nchw-powerOfTwo"
    page.get_by_label("Profile").select_option(name)
    wait_for_profile(page, name)
    exact = page.get_by_placeholder("or type a budget with its unit, e.g. 120MiB")
    exact.fill("120")
    exact.press("Enter")
    page.get_by_text("'120' has no unit").wait_for(timeout=10_000)
    exact.fill("120MiB")
    exact.press("Enter")
    wait_text(page, lambda: budget_card(page), r"budget 120 MiB in total")
    page.get_by_text("Total workspace budget: 120 MiB (log scale)").wait_for(timeout=10_000)
    page.get_by_role("button", name="WR", exact=True).click()
    wait_text(page, lambda: budget_card(page), r"WR, powerOfTwo, budget .* per kernel")
    page.get_by_role("button", name="WD", exact=True).click()
    wait_text(page, lambda: budget_card(page), r"WD, powerOfTwo, budget 120 MiB in total")
    for engines in ("heuristics", "deterministic", "all"):
        page.get_by_role("button", name=engines, exact=True).click()
        page.wait_for_timeout(300)
        wait_text(page, lambda: budget_card(page), r"budget 120 MiB in total")
    page.get_by_role("button", name="undivided", exact=True).click()
    wait_text(page, lambda: page.locator("[data-testid=summary-speedup] .v").inner_text(), r"^1\.00x$")
    page.get_by_role("button", name="powerOfTwo", exact=True).click()
    wait_text(page, lambda: budget_card(page), r"WD, powerOfTwo, budget 120 MiB")

    predicted = page.locator("[data-testid=summary-time] .v").inner_text()
    page.locator(".bk-tab").filter(has_text="Timeline (Fig. 3)").click()
    page.get_by_text(f"{predicted} predicted").first.wait_for(timeout=20_000)
    page.locator(".bk-tab").filter(has_text="Plan").click()
    page.locator(".tabulator-cell", has_text="conv1:F").first.wait_for(timeout=20_000)
    page.locator(".bk-tab").filter(has_text="Memory").click()
    page.get_by_text("Peak ").first.wait_for(timeout=60_000)
    capacity = page.get_by_placeholder("e.g. 24GiB")
    capacity.fill("1GiB")
    capacity.press("Enter")
    wait_text(
        page,
        lambda: page.get_by_label("GPU capacity").evaluate("s => s.options[s.selectedIndex].text"),
        r"^typed: 1 GiB$",
    )
    page.locator(".bk-tab").filter(has_text="Workspace division").click()

    compare = page.get_by_label("Compare with (the same network on another GPU)")
    compare.select_option("h200-resnet50-b64-tf32-nchw-powerOfTwo")
    page.get_by_text("NVIDIA H200's WD front from its own profile").first.wait_for(timeout=60_000)
    compare.select_option(label="(none)")
    wait_text(page, lambda: page.get_by_text("Sum over ").first.inner_text(), r"^(?!.*H200)")
    assert not page.problems, page.problems


RAPID = [
    "h100-resnet50-b64-tf32-nchw-powerOfTwo",
    "h200-resnet50-b64-tf32-nchw-powerOfTwo",
    "h100-alexnet-b256-tf32-nchw-all",
    "h100-vgg16-b64-fp16-nhwc-powerOfTwo",
]
TABS = ["Workspace division", "Timeline (Fig. 3)", "Plan", "Memory"]


def rapid_step(page, rng: random.Random, memory_open: bool) -> str:
    """One user action, taken without waiting for the page to catch up with the last; returns its name."""
    action = rng.choice(["tab", "tab", "compare", "mode", "engines", "policy", "profile", "budget", "capacity"])
    if action == "tab":
        tab = rng.choice(TABS)
        page.locator(".bk-tab").filter(has_text=tab).click()
        return f"tab {tab}"
    if action == "compare":
        compare = page.get_by_label("Compare with (the same network on another GPU)")
        if not compare.is_visible():
            return "compare (none offered)"
        value = rng.choice(compare.evaluate("s => Array.from(s.options).map(o => o.value)"))
        compare.select_option(value)
        return f"compare {value or '(none)'}"
    if action == "profile":
        name = rng.choice(RAPID)
        page.get_by_label("Profile").select_option(name)
        return f"profile {name}"
    if action == "budget":
        text = rng.choice(["120MiB", "1GiB", "8MiB", "120"])
        box = page.get_by_placeholder("or type a budget with its unit, e.g. 120MiB")
        box.fill(text)
        box.press("Enter")
        return f"budget {text}"
    if action == "capacity":
        if not memory_open:
            return "capacity (tab closed)"
        text = rng.choice(["1GiB", "2GiB", "80GiB"])
        box = page.get_by_placeholder("e.g. 24GiB")
        box.fill(text)
        box.press("Enter")
        return f"capacity {text}"
    name = rng.choice(
        {"mode": ["WR", "WD"], "engines": ["heuristics", "deterministic"], "policy": ["undivided"]}[action]
    )
    button = page.get_by_role("button", name=name, exact=True)
    if not button.is_visible():  # a profile measured for one policy offers no other
        return f"{action} {name} (not offered)"
    button.click()
    return f"{action} {name}"


def test_rapid_switching_on_measured_profiles_never_tears_the_page(bundled_plain_page):
    """60 seeded random actions (tabs, compare, mode, engines, policy, profile, typed budget and capacity), each
    taken as soon as its control can be used, on the app served as the README says. Taken like this, pages tore
    ("reference pNNNN isn't known": an edit written ahead of Panel's queued messages). The page must then still
    follow a profile switch. Served with Panel's thread pool (--num-threads 2) the same walk ended on an earlier
    choice than the last in 3 of 16 runs, so the app turns the pool off (dashboard/threads.py)."""
    page = bundled_plain_page
    rng = random.Random(4)
    taken, memory_open = [], False
    for _ in range(60):
        taken.append(rapid_step(page, rng, memory_open))
        if taken[-1].startswith("tab "):
            memory_open = taken[-1] == "tab Memory"
        assert not page.problems, (taken, page.problems)
    page.get_by_label("Profile").select_option(DEFAULT)
    page.get_by_role("button", name="powerOfTwo", exact=True).click()  # a chosen policy outlives the switch
    try:
        wait_for_profile(page, DEFAULT)
    except AssertionError as err:
        raise AssertionError(f"{err} after {taken}") from None
    page.wait_for_timeout(1000)  # the last updates' trailing messages
    assert not veiled(page), taken
    assert not page.problems, (taken, page.problems)


def test_a_plan_from_another_bundled_profile_switches_the_page_to_it(bundled_page, tmp_path):
    """A new user's likely upload: a plan made from the H200 fp16 ResNet-50 profile while the default profile is
    shown. The page switches to the profile the plan came from and shows the plan's controls."""
    from engine.planner import make_plan
    from engine.profile import Profile, resolve_profile
    from engine.zoo import get_network

    name = "h200-resnet50-b64-fp16-nhwc-powerOfTwo"
    plan = make_plan(
        Profile.load(resolve_profile(name)), get_network("resnet50", 64), mode="wr", budget="64MiB", precision="fp16"
    )
    path = tmp_path / "resnet50-fp16.plan.json"
    plan.save(path)
    wait_for_profile(bundled_page, DEFAULT)
    bundled_page.evaluate(WATCH_VEIL_JS, bundled_page.locator("[data-testid=busy]").element_handle())
    bundled_page.locator("input[type=file]").set_input_files(str(path))
    bundled_page.get_by_text(f"switched to profile {name}").wait_for(timeout=60_000)
    wait_for_profile(bundled_page, name)
    assert bundled_page.get_by_label("Profile").input_value() == name
    wait_text(bundled_page, lambda: str(veiled(bundled_page)), "^False$")  # lifted once the upload is answered
    assert bundled_page.evaluate("window.veilShown"), "the views were not veiled while the server loaded the plan"
    assert not bundled_page.problems, bundled_page.problems


# Records whether the veil was ever up from now on (an upload's veil may lift before a poll would see it).
WATCH_VEIL_JS = """(veil) => {
  window.veilShown = false;
  new MutationObserver(() => { if (veil.classList.contains('on')) window.veilShown = true; })
    .observe(veil, {attributes: true, attributeFilter: ['class']});
}"""
