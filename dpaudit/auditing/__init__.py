"""Audit statistics: ROC/AUC and intervals, ceilings from a guarantee, the one-run and f-DP ε lower bounds, low-FPR reporting, the canary design and result records."""
