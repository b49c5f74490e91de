"""The defense contract suite. The checks ship in the package (:mod:`dpaudit.testing`, as
scikit-learn ships ``check_estimator``), so a defense written outside this repository runs them
too; ``test_defense_contract.py`` runs every check on every defense the plugins register (a new
defense needs only its fast settings in that file's ``FAST`` table; without them it is checked
at its defaults). To check one defense by hand::

    from dpaudit.testing import check_defense
    check_defense("gcon", tmp_path, encoder_epochs=5)   # {check: "passed" | "skipped: why"}

``test_contract_catches.py`` shows the checks fail on defenses broken on purpose.
"""
