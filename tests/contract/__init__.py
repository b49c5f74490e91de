"""The defense contract suite (a package so its checker imports as ``contract.checks``)."""
