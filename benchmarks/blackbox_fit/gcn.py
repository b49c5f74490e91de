"""The model of ``fit.py`` (a sibling module: ``--train benchmarks/blackbox_fit/fit.py:fit`` must
import it, as ``python fit.py`` would)."""

import torch
from torch import nn
from torch_geometric.nn import GCNConv


class GCN(nn.Module):
    """Two GCN layers, 64 hidden units, dropout 0.5: the textbook Cora GCN, no DP."""

    def __init__(self, num_features: int, num_classes: int, hidden: int = 64):
        super().__init__()
        self.conv1 = GCNConv(num_features, hidden)
        self.conv2 = GCNConv(hidden, num_classes)

    def forward(self, x, edge_index):
        h = torch.relu(self.conv1(x, edge_index))
        h = nn.functional.dropout(h, p=0.5, training=self.training)
        return self.conv2(h, edge_index)
