"""Numerical notes of the bundled profiles: one note set per plan name within a signature.

A plan name means one engine configuration on one graph, and the graphs of a signature differ only in
the micro-batch, so a name carrying two note sets in one signature is a mislabel (the profiler once
cached notes by name across kernel kinds). The ``deterministic`` engine set trusts these labels.
"""

import pytest

from engine.profile import Profile, bundled_profiles

PROFILES = bundled_profiles()


@pytest.fixture(scope="module", params=sorted(PROFILES))
def profile(request) -> Profile:
    return Profile.load(PROFILES[request.param])


def test_there_are_bundled_profiles():
    assert len(PROFILES) >= 10


@pytest.mark.slow
def test_one_note_set_per_plan_name_within_a_signature(profile):
    t = profile.table
    sets = t.groupby(["signature", "plan"]).numerical_notes.unique()
    mixed = sets[sets.map(len) > 1]
    assert mixed.empty, (
        f"{len(mixed)} (signature, plan) pairs carry two note sets, e.g. {mixed.index[0]}: {list(mixed.iloc[0])}"
    )


@pytest.mark.slow
def test_deterministic_plans_never_carry_nondeterministic(profile):
    t = profile.table
    det = profile.restrict("deterministic").table
    assert not det.numerical_notes.str.contains("NONDETERMINISTIC").any()
    flagged = set(
        zip(
            t.signature[t.numerical_notes.str.contains("NONDETERMINISTIC")],
            t.plan[t.numerical_notes.str.contains("NONDETERMINISTIC")],
        )
    )
    kept = set(zip(det.signature, det.plan))
    both = kept & flagged
    assert not both, f"{len(both)} plans are deterministic at one micro-batch and not at another, e.g. {min(both)}"


def test_labels_were_made_per_signature(profile):
    """Every bundled profile was labelled per signature by the profiler, or relabelled by tools/label_notes.py."""
    from engine.gpu.work import NOTES_GRANULARITY

    p = profile.provenance
    relabelled = p.get("numerical_notes_labelled", {})
    per_signature = p.get("options", {}).get("numerical_notes") == NOTES_GRANULARITY
    assert per_signature or "granularity" in relabelled, relabelled
