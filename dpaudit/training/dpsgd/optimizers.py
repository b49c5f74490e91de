"""The optimisers a DP-SGD run steps with (:func:`make_optimizer`: Adam, or SGD with momentum)."""

from __future__ import annotations

import torch


def make_optimizer(name: str, params, lr: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; use adam or sgd")
