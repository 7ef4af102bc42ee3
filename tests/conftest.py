"""Shared fixtures. Every profile made here is SYNTHETIC (engine/testing/synthetic.py)."""

from __future__ import annotations

import pytest

from engine.testing.synthetic import synthetic_profile


@pytest.fixture(scope="session")
def synthetic_profile_path(tmp_path_factory):
    """engine.testing.synthetic.synthetic_profile() (AlexNet, B=256, powerOfTwo) saved as a gzip profile file."""
    path = tmp_path_factory.mktemp("profiles") / "SYNTHETIC-alexnet-b256.profile.json.gz"
    synthetic_profile().save(path)
    return path
