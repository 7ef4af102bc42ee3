"""Summary cards: predicted time, speed-up over undivided at the same memory, workspace, gap to optimum."""

from __future__ import annotations

import html
import math

import panel as pn

from engine.units import format_size

from .base import StateView

CSS = """
.ucd-cards {display: flex; gap: 10px; flex-wrap: wrap;}
.ucd-card {flex: 1 1 180px; border: 1px solid #d0d7de; border-radius: 6px; padding: 6px 10px; background: #fafbfc;}
.ucd-card .t {font-size: 0.8em; color: #57606a;}
.ucd-card .v {font-size: 1.45em; font-weight: 600;}
.ucd-card .s {font-size: 0.78em; color: #57606a;}
.ucd-scope {font-size: 0.85em; color: #57606a; margin-bottom: 4px;}
"""


def card(title: str, value: str, sub: str, testid: str) -> str:
    return (
        f'<div class="ucd-card" data-testid="{testid}"><div class="t">{html.escape(title)}</div>'
        f'<div class="v">{html.escape(value)}</div><div class="s">{html.escape(sub)}</div></div>'
    )


def summary_html(s: dict) -> str:
    """Cards from ``state.summarize``'s dict (plain HTML so tests and the browser read the same text)."""
    if not s.get("feasible"):
        return card("No plan", "infeasible", s.get("reason", ""), "summary-infeasible")
    budget = format_size(s["budget"]) + (" per kernel" if s["mode"] == "WR" else " in total")
    cards = [
        card(
            "Predicted convolution time",
            f"{s['time_ms']:.2f} ms",
            f"{s['mode']}, {s['policy']}, budget {budget}",
            "summary-time",
        )
    ]
    if math.isnan(s["speedup"]):
        cards.append(card("Speed-up over undivided", "n/a", s.get("baseline_reason", ""), "summary-speedup"))
    else:
        cards.append(
            card(
                "Speed-up over undivided",
                f"{s['speedup']:.2f}x",
                f"undivided at the same memory: {s['baseline_ms']:.2f} ms",
                "summary-speedup",
            )
        )
    cards.append(
        card("Total workspace", format_size(s["workspace"]), f"sum over {s['n_kernels']} kernels", "summary-workspace")
    )
    cards.append(
        card(
            "Distance to unlimited optimum",
            f"+{s['gap_ms']:.2f} ms ({s['gap_pct']:.1f}%)",
            f"optimum {s['optimum_ms']:.2f} ms with {format_size(s['optimum_workspace'])}",
            "summary-gap",
        )
    )
    if "measured_ms" in s:
        check = ""
        if "all_passed" in s:
            check = (
                "; results correct"
                if s["all_passed"]
                else "; WRONG RESULTS in " + ", ".join(s["failed"][:4]) + ("..." if len(s["failed"]) > 4 else "")
            )
        cards.append(
            card(
                "Measured on GPU",
                f"{s['measured_ms']:.2f} ms",
                f"{s['measured_ms'] / s['time_ms']:.2f}x the prediction{check}",
                "summary-measured",
            )
        )
    return '<div class="ucd-cards" data-testid="summary">' + "".join(cards) + "</div>"


class SummaryView(StateView):
    _watch = {"planning": ("result", "error")}

    def _build(self) -> None:
        self.pane = self.panel = pn.pane.HTML("", stylesheets=[CSS], sizing_mode="stretch_width")

    def _refresh(self, *_events) -> None:
        state = self.state
        result = state.result
        if result is None:
            self.pane.object = card("No plan", "-", state.error or "no profile loaded", "summary-none")
        else:
            self.pane.object = scope_html(result.analysis) + summary_html(result.summary)


def scope_html(analysis) -> str:
    """What the cards are about: the GPU the profile was measured on and the scope (from the same snapshot)."""
    sc, gpu = analysis.scope, analysis.profile.provenance.get("gpu", "unknown GPU")
    synthetic = "SYNTHETIC profile, " if analysis.profile.synthetic else ""
    return (
        f'<div class="ucd-scope" data-testid="summary-scope">{html.escape(synthetic + str(gpu))}: '
        f"{html.escape(sc.network)} B={sc.batch}, {sc.precision}, {sc.layout}</div>"
    )
