"""The networks the memory tests share (engine/testing/networks.py) are what the papers describe (the zoo's
own tests check alexnet-caffe against SuperNeurons)."""

from __future__ import annotations

from engine.testing.networks import vgg


def test_vgg_fixture_depths():
    assert len(vgg(16).conv_layers()) == 13 and len(vgg(416).conv_layers()) == 413
    assert vgg(16).param_count == 138_357_544
