"""Graphs: the dataset loaders and the synthetic generator, graph files a user supplies, splits and the audit game's membership draw, sparse adjacency."""
