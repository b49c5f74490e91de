"""The optimisers a DP-SGD run steps with (:func:`make_optimizer`: Adam, or SGD with momentum)."""

from __future__ import annotations

import torch


def make_optimizer(name: str, params, lr: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """A torch optimizer by name: Adam, or SGD with momentum 0.9.

    Args:
        name: ``"adam"`` or ``"sgd"``.
        params: parameters to optimise.
        lr: learning rate.
        weight_decay: L2 weight decay.

    Returns:
        The optimizer.

    Raises:
        ValueError: an unknown ``name``.
    """
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; use adam or sgd")
