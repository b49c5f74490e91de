"""A user's non-private GCN training function for ``dpaudit canary --train`` (the benchmark
``benchmarks/bench_blackbox_power.py``): Adam, lr 0.01, weight decay 5e-4, 200 epochs."""

import torch
from gcn import GCN  # a sibling module of this file


def fit(dataset, split):
    data = dataset.data
    model = GCN(dataset.num_features, dataset.num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(200):
        model.train()
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        torch.nn.functional.cross_entropy(out[split.train], data.y[split.train]).backward()
        optimizer.step()
    model.eval()
    return model
