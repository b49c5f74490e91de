"""Attacks on released models (filled in by the attacks issue)."""
