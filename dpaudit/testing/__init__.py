"""What a defense author needs to test a new defense, shipped in the package (as scikit-learn
ships ``check_estimator``).

>>> from dpaudit.testing import check_defense
>>> check_defense("my-defense", tmp_path, epochs=3)        # doctest: +SKIP
{'check_save_load_round_trip': 'passed', ...}

:func:`check_defense` runs every check of the defense contract (:mod:`dpaudit.testing.checks`:
save/load round trip, plan integrity on load, release neutrality between neighbouring graphs,
bad hyperparameters refused, determinism); :mod:`dpaudit.testing.neighbours` builds the
neighbouring graphs (one node or one edge removed) the release-neutrality check compares.
docs/howto/new-defense.md walks through it.
"""

from dpaudit.testing.checks import (
    CHECKS,
    CheckSkipped,
    Subject,
    check_defense,
    registered_defenses,
    tiny_graph,
)

__all__ = ["CHECKS", "CheckSkipped", "Subject", "check_defense", "registered_defenses", "tiny_graph"]
