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


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (README: ``-n logical --dist loadgroup``) the GPU tests run one at a time on one worker:
    timings taken while another worker drives the same GPU would mean nothing."""
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.xdist_group("gpu"))
