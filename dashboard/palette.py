"""Colours: one per cuDNN engine (the most distinct for the engines plans pick most) and one per
batch-size policy, for every policy engine.policies knows, so a new policy is drawn without edits here."""

from __future__ import annotations

from functools import lru_cache

from bokeh.palettes import Category10_10, Category20_20, Category20b_20, Category20c_20

from engine.policies import POLICIES
from engine.profile import Profile

# distinct hues first (Category20's dark halves), then their light halves, then two more sets of 20
_PALETTE = Category20_20[::2] + Category20_20[1::2] + Category20b_20 + Category20c_20
BASELINE_COLOR = "#7f7f7f"


def _policy_colors() -> dict[str, str]:
    """undivided (the baseline) grey; the other policies in order from Category10 without its grey."""
    others = [c for c in Category10_10 if c != BASELINE_COLOR]
    out, i = {}, 0
    for p in POLICIES:
        if p == "undivided":
            out[p] = BASELINE_COLOR
        else:
            out[p] = others[i % len(others)]
            i += 1
    return out


POLICY_COLORS = _policy_colors()


@lru_cache(maxsize=64)
def engine_labels(profile: Profile) -> dict[str, str]:
    """{plan name: cuDNN engine label}, the colour key of Fig. 3/8 views; knob settings of one engine share it."""
    t = profile.table[["plan", "engine_id"]].drop_duplicates("plan")
    return {p: f"eng{int(e)}" for p, e in zip(t.plan, t.engine_id)}


def engine_colors(engines) -> dict[str, str]:
    """Stable colours per engine, in the given order of importance (the most distinct colours first)."""
    ordered = list(dict.fromkeys(engines))
    return {e: _PALETTE[i % len(_PALETTE)] for i, e in enumerate(ordered)}


def engines_by_wins(profile: Profile) -> list[str]:
    """Engine labels ordered by how often the engine is the fastest plan of a (kernel, micro-batch) in the
    profile: the engines that plans actually pick get the most distinct colours."""
    ok = profile.table[profile.table.status == "ok"]
    labels = engine_labels(profile)
    if ok.empty:
        return list(dict.fromkeys(labels.values()))
    best = ok.loc[ok.groupby(["signature", "micro_batch"]).time_ms.idxmin(), "plan"].map(labels)
    wins = best.value_counts()
    rest = sorted(set(labels.values()) - set(wins.index), key=lambda e: (len(e), e))
    return list(wins.index) + rest
