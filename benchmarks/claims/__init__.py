"""Headline claims of each paper, one module per defense (see ``benchmarks/reproduce.py``)."""
