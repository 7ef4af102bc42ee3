"""A model of one's own, neither in the zoo nor in torchvision: what ``engine.pytorch.optimize`` and
``python -m engine torch-plan --network examples.user_model:build@3x64x64`` are for.

Grouped, depthwise, dilated, asymmetric (1x3) and 5x5 convolutions and a residual add. Average pooling
only (a rounding change flips max-pool choices, which moves whole gradient entries whatever the
convolution algorithm), so its gradients can be compared with stock PyTorch's.
"""

from __future__ import annotations

from torch import nn


class UserNet(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 5, padding=2)  # 5x5
        self.grouped = nn.Conv2d(32, 64, 3, padding=1, groups=4)  # grouped
        self.depthwise = nn.Conv2d(64, 64, 3, padding=2, dilation=2, groups=64)  # depthwise, dilated
        self.wide = nn.Conv2d(64, 64, (1, 3), padding=(0, 1))  # asymmetric kernel
        self.pool = nn.AvgPool2d(2)
        self.head = nn.Conv2d(64, 128, 3, stride=2, padding=1)
        self.act = nn.ReLU()
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(128, classes)

    def forward(self, x):
        x = self.act(self.stem(x))
        x = self.act(self.grouped(x))
        x = x + self.act(self.wide(self.act(self.depthwise(x))))  # residual add
        x = self.act(self.head(self.pool(x)))
        return self.fc(self.gap(x).flatten(1))


def build() -> nn.Module:
    return UserNet()
