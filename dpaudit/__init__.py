"""dpaudit: train differentially private GNNs, attack them, and report what they leak."""

__version__ = "0.1.0"
