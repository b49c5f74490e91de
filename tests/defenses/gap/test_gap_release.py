"""Release neutrality of GAP (issue 23): trained with the same seed on neighbouring inputs,
gap-edp (G and G minus one edge) and sound gap-ndp (n and n − 1 training nodes) write a
``model.json`` identical leaf by leaf — only the weights (the accounted mechanism's output)
and their hash differ. Before, the config held the training graph's key (both levels) and node
count, the tensor manifest the cached aggregations' shape [N, K·hidden], the card the
validation accuracy, and gap-ndp's ledger q = B/n and ⌈n/B⌉ steps per epoch from the real n."""

from __future__ import annotations

import pytest

import defenses  # noqa: F401  (registers the defenses)
from dpaudit.data.splits import make_split
from dpaudit.testing.neighbours import train_and_compare, without_edge, without_node
from dpaudit.training.registry import get_defense

SPLIT = "random:0.5,0.25,0.25"


@pytest.fixture(scope="module")
def split(small_graph):
    return make_split(small_graph, SPLIT, 0)


def test_gap_edp_release_is_neutral_to_one_edge(small_graph, split, tmp_path):
    neighbour = without_edge(small_graph, split)
    assert neighbour.data.edge_index.size(1) == small_graph.data.edge_index.size(1) - 2  # both directions
    differ = train_and_compare(
        lambda: get_defense("gap-edp")(epsilon=4.0, seed=0, encoder_epochs=5, epochs=5),
        (small_graph, split),
        (neighbour, split),
        tmp_path,
    )
    assert differ == {}


def test_gap_ndp_release_is_neutral_to_one_node(small_graph, split, tmp_path):
    """The removed node is the highest-degree training node (it moves the most); batch 64 makes
    q < 1, so a schedule read from the real training-set size would differ."""
    smaller, smaller_split = without_node(small_graph, split)
    assert len(smaller_split.train) == len(split.train) - 1
    differ = train_and_compare(
        lambda: get_defense("gap-ndp")(epsilon=8.0, seed=0, max_degree=20, batch_size=64, encoder_epochs=2, epochs=3),
        (small_graph, split),
        (smaller, smaller_split),
        tmp_path,
    )
    assert differ == {}
