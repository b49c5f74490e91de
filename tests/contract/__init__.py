"""The defense contract suite (a package so its checker imports as ``contract.checks``).

``test_defense_contract.py`` runs every check of ``checks.py`` on every defense the plugins
register; a new defense needs only its fast settings in that file's ``FAST`` table (without
them it is checked at its defaults). To check one defense by hand::

    from contract.checks import check_defense
    check_defense("gcon", tmp_path, encoder_epochs=5)   # {check: "passed" | "skipped: why"}

``test_contract_catches.py`` shows the checks fail on defenses broken on purpose.
"""
