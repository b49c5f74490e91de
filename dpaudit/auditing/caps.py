"""The caps on an attack's counts (``num_references``, ``runs`` ...), checked before any work.

Above its cap a count makes an attack run for hours (or holds more than any graph here gives
it), so a command refuses it in one line unless ``--allow-long``. The caps are kept here, in a
module that imports nothing heavy, so that the command line refuses such a count before torch
is imported (:func:`dpaudit.app.names.builtin_attack_settings` says which attack has which
count); :mod:`attacks` applies the same check to every run.
"""

from __future__ import annotations

from dpaudit.errors import ConfigurationError

# Above these caps a count makes an attack run for hours (or holds more than any graph here
# gives it), so a command refuses it in one line unless ``--allow-long``; what each count costs
# is said with it. Each cap is 25-250 times the default; the audit's time estimate
# (:func:`dpaudit.app.workflows.audit.audit_plan`) then judges the whole plan.
COUNT_CAPS: dict[str, tuple[int, str]] = {
    "runs": (50, "each run repeats the whole attack"),
    "num_shadows": (256, "each trains one shadow model with the target's recipe"),
    "num_references": (256, "each trains one reference model with the target's recipe"),
    "max_pairs": (1_000_000, "pairs scored per run"),
    "num_pairs": (20_000, "each pair costs LinkTeller two perturbed queries of the model"),
    "pr_nodes": (100_000, "each node costs LinkTeller one perturbed query of the model"),
    "n_boot": (100_000, "bootstrap draws of every confidence interval"),
    "max_plot_nodes": (50_000, "nodes embedded by t-SNE/UMAP"),
    "population_size": (1_000_000, "population nodes scored per reference model"),
    "shadow_nodes_per_class": (1_000_000, "nodes per class in every shadow training set"),
    "label_probe_nodes": (1_000_000, "nodes the label probe is fitted on"),
    "max_members": (10_000_000, "members in the audit game"),
    "top_k": (1_000, "posteriors kept per node"),
    "knn_k": (1_000, "neighbours of the k-NN probe"),
}
#: the option that lifts the caps and the time limit
ALLOW_LONG = "--allow-long"


def check_attack_caps(name: str, settings: dict, allow_long: bool = False) -> None:
    """Each count of attack ``name`` at most its cap (:data:`COUNT_CAPS`) unless ``allow_long``:
    above it one line says what the count costs and how to run it anyway.

    Args:
        name: the attack (named in the message).
        settings: the settings given to it; only integer values of keys in :data:`COUNT_CAPS` are checked.
        allow_long: ``True`` (``--allow-long``) skips the check.

    Raises:
        ConfigurationError: a count is above its cap.
    """
    if allow_long:
        return
    for key, value in settings.items():
        cap = COUNT_CAPS.get(key)
        if cap is None or isinstance(value, bool) or not isinstance(value, int) or value <= cap[0]:
            continue
        raise ConfigurationError(
            f"attack {name!r}: {key}={value} is above its cap of {cap[0]:,} ({cap[1]}: hours of work); "
            f"lower it, or pass {ALLOW_LONG} to run it anyway"
        )
