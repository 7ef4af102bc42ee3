"""engine.testing.torchmodels.smooth: the GPU comparisons' models keep their convolutions and lose every kink and
random draw (a kink left in would let a 1e-7 rounding difference move whole gradient entries)."""

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

from engine.testing.torchmodels import smooth  # noqa: E402

KINKS = (torch.nn.ReLU, torch.nn.ReLU6, torch.nn.MaxPool2d, torch.nn.Hardswish, torch.nn.Hardsigmoid)


@pytest.mark.parametrize("name", ["mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "squeezenet1_1"])
def test_smooth_keeps_the_convolutions_and_removes_kinks_and_random_draws(name):
    from torchvision.ops import StochasticDepth

    model = getattr(torchvision.models, name)(weights=None, num_classes=10)
    convs = [(n, m.weight) for n, m in model.named_modules() if isinstance(m, torch.nn.Conv2d)]
    randoms = (torch.nn.modules.dropout._DropoutNd, StochasticDepth)
    assert any(isinstance(m, KINKS) or (isinstance(m, randoms) and m.p > 0) for m in model.modules())
    smooth(model)
    assert [(n, m.weight) for n, m in model.named_modules() if isinstance(m, torch.nn.Conv2d)] == convs
    assert not any(isinstance(m, KINKS) for m in model.modules())
    random = [m for m in model.modules() if isinstance(m, randoms)]
    assert random and all(m.p == 0 for m in random)
    model.train()
    x = torch.randn(2, 3, 64, 64)
    assert torch.equal(model(x), model(x))  # no random draw left in training mode
