"""Training: the Defense interface and its registry, user models adapted to it, Poisson sampling, DP-SGD, and accounted hyperparameter selection."""
