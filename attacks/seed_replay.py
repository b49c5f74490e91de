r"""``seed-replay``: is the release reproducible from a guessable seed?

A private model's guarantee holds only while its noise is secret. A release whose noise was
drawn from ``--seed`` (dpaudit before issue 46, and every library that seeds its noise) is a
deterministic function of (data, seed), and the seed is small: the default 0, or below 2³¹.
This attack re-trains the release from its **public card** alone — defense, hyperparameters,
target ε and δ option, dataset name and split specification — with seeded noise
(``noise="seeded"``) for ``seeds`` seeds — 0 (the default) first, then ``seed``, ``seed + 1`` ... (as
``dpaudit train --seed s`` would: the split and the training take the same seed), and compares
each re-training's ``weights_sha256`` with the release's. It stops at the first match.

**A match is a broken guarantee, with ε lower bound ∞.** With the seed s in hand, the release
is M_s(D) for a *deterministic* M_s: the seed is a choice the user made, not coins internal to
the mechanism, so DP's probability is over nothing. The adversary of the DP game holds the
neighbouring pair (D, D′); it re-trains M_s on both and answers "D" exactly when M_s(D) equals
the release. Then Pr[answer D | D] = 1 and Pr[answer D | D′] = 0 whenever M_s(D) ≠ M_s(D′) — a
one-unit change moves the SHA-256 of the weights, as the tests check
(``tests/attacks/test_seed_replay.py``) — and no finite ε satisfies
1 ≤ e^ε · 0 + δ for δ < 1. The bound needs no audit game or membership coin: the distinguisher is
exact for *any* neighbouring pair, so ``bound_valid`` is true and ``epsilon_lower_bound`` is
``math.inf`` (JSON has no ∞: the saved result keeps it as ``extra["seed_replay"]["epsilon_lower_bound"] =
"inf"``).

**No match says only that these seeds did not reproduce it** — never that the noise is secure:
a release drawn with dpaudit's default noise (OS entropy, :mod:`dpaudit.training.noise`) is never
reproduced, and neither is one from a seed outside the range tried.

Cost: ``seeds`` re-trainings of the target's recipe at most, each about as long as the original
training (the owner's record says how long that was; the attack logs its estimate first).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from attacks import _common as C
from attacks import register_attack
from dpaudit.auditing.results import AttackResult
from dpaudit.data.datasets import GraphDataset
from dpaudit.data.splits import make_split
from dpaudit.errors import ConfigurationError, DPAuditError
from dpaudit.release.model import ReleasedModel
from dpaudit.release.provenance import resolve_dataset
from dpaudit.training.constraints import COUNT
from dpaudit.training.noise import SEEDED, card_noise_mode
from dpaudit.training.registry import get_defense

log = logging.getLogger(__name__)

SEED_REPLAY_CONSTRAINTS: dict[str, list[Any]] = {
    "runs": C.SETTING_CONSTRAINTS["runs"],  # unused: a replay is exact, one run says all
    "seeds": [COUNT],  # how many seeds are tried: 0 (the default seed) first, then seed, seed + 1, ...
    "seed": C.SETTING_CONSTRAINTS["seed"],
    "n_boot": C.SETTING_CONSTRAINTS["n_boot"],  # unused: no statistic is bootstrapped
    "device": C.SETTING_CONSTRAINTS["device"],
    "data_root": C.SETTING_CONSTRAINTS["data_root"],
    "deployment": C.SETTING_CONSTRAINTS["deployment"],  # unused: nothing is queried, the tensors are compared
}

#: what a reproduced release is reported as
BROKEN = (
    "the release was reproduced bit for bit from its public card and seed {seed}: its noise is a function of a "
    "guessable seed, so an adversary holding the neighbouring pair distinguishes them exactly (ε lower bound ∞) — "
    "the guarantee is broken"
)


def _recipe(model: ReleasedModel) -> tuple[type, dict[str, Any], float, str, str | None]:
    card = model.card
    method = card.get("method")
    if not isinstance(method, str) or card.get("adapter") or card.get("surrogate"):
        raise ConfigurationError("seed-replay re-trains a dpaudit defense from its card; this model names none")
    cls = get_defense(method)
    hp = dict(card.get("hyperparameters") or {})
    eps = card.get("target_epsilon")
    epsilon = math.inf if eps is None else float(eps)
    delta = str(card.get("delta_option", "auto"))
    spec = (card.get("split") or {}).get("spec")
    return cls, hp, epsilon, delta, spec


def _seed_replay_cost(settings, measured, dataset) -> tuple[int, float]:
    """One re-training of the target's recipe per seed tried, at most."""
    seeds = C.count_setting(settings, "seeds", 4)
    return seeds, seeds * measured["shadow"]


def _no_releases(settings, dataset, free_graph) -> int:
    """A replay queries nothing: it asks a query-charged target for no release."""
    return 0


@register_attack(
    "seed-replay",
    SEED_REPLAY_CONSTRAINTS,
    order=8,
    heading="replay",
    quick={"seeds": 1},
    cost=_seed_replay_cost,
    releases=_no_releases,
)
def seed_replay(
    model: ReleasedModel,
    dataset: GraphDataset | None = None,
    *,
    runs: int = 1,
    seeds: int = 4,
    seed: int = 0,
    n_boot: int = 1000,
    device: str = "cpu",
    data_root: str | None = None,
    deployment: str = "auto",
) -> AttackResult:
    """Re-train ``model`` from its public card with seeded noise for the seeds ``0 .. seeds − 1``
    and compare the released tensors' SHA-256 (see the module docstring).

    Args:
        model: the release (its card names a registered defense).
        dataset: the dataset its card names (loaded from the card when ``None``).
        seeds: how many seeds to try: 0 (the default seed) first, then ``seed``, ``seed + 1`` ...
            (with ``seed = 0``: the seeds ``0 .. seeds − 1``).
        runs: unused (a replay is exact: one run says all).
        seed: where the range after the default seed starts.
        n_boot: unused (no statistic is bootstrapped).
        device: where to re-train (CPU: the seeded streams are drawn on the CPU either way).
        data_root: where to load the dataset from.
        deployment: unused (nothing is queried).

    Returns:
        The :class:`AttackResult`: ``extra["seed_replay"]`` says whether and with which seed the
        release was reproduced; a reproduction sets ``epsilon_lower_bound = math.inf`` and
        ``bound_valid``.

    Raises:
        ConfigurationError: the card names no defense, or its recipe cannot be rebuilt.
    """
    settings = {
        "runs": runs,
        "seeds": seeds,
        "seed": seed,
        "n_boot": n_boot,
        "device": device,
        "data_root": data_root,
        "deployment": deployment,
    }
    cls, hp, epsilon, delta, spec = _recipe(model)
    released = model.weights_sha256()
    summary: dict[str, Any] = {
        "seeds_tried": [],
        "reproduced": False,
        "seed": None,
        "card_noise": card_noise_mode(model.card),
        "released_weights_sha256": released,
    }
    notes: list[str] = []
    if not model.privacy.is_private:
        notes.append("not a private model: there is no privacy noise to replay")
        return _result(model, settings, summary, notes)
    dataset = resolve_dataset(model, dataset, data_root)
    each = ((model.record or {}).get("timings") or {}).get("train_seconds")
    about = f", about {each:.1f}s each (the owner's training time)" if isinstance(each, (int, float)) else ""
    log.info("seed-replay: up to %d re-training(s) of %s%s", seeds, cls.name, about)
    for candidate in candidate_seeds(seeds, seed):
        try:
            defense = cls(epsilon=epsilon, delta=delta, seed=candidate, device=device, noise=SEEDED, **hp)
        except (TypeError, DPAuditError) as exc:
            raise ConfigurationError(f"seed-replay cannot rebuild {cls.name!r} from the card: {exc}") from None
        replay = defense.fit(dataset, make_split(dataset, spec, candidate))
        summary["seeds_tried"].append(candidate)
        if replay.weights_sha256() == released:
            summary.update(reproduced=True, seed=candidate)
            break
        log.info("seed-replay: seed %d does not reproduce the release", candidate)
    if summary["reproduced"]:
        notes.append(BROKEN.format(seed=summary["seed"]))
    else:
        tried = ", ".join(str(s) for s in summary["seeds_tried"])
        notes.append(
            f"not reproduced by the seeds {tried}: this says nothing about other seeds, and the noise may still be seeded"
            if summary["card_noise"] == SEEDED
            else f"not reproduced by the seeds {tried} (the card says the noise is drawn from OS entropy)"
        )
    return _result(model, settings, summary, notes)


def candidate_seeds(count: int, start: int = 0) -> list[int]:
    """The seeds tried: 0 (``--seed``'s default) first, then ``start``, ``start + 1`` ... — ``count``
    distinct seeds.

    Args:
        count: how many.
        start: where the range after 0 starts.

    Returns:
        The seeds, in the order tried.
    """
    out = [0]
    candidate = int(start)
    while len(out) < int(count):
        if candidate not in out:
            out.append(candidate)
        candidate += 1
    return out[: int(count)]


def _result(model: ReleasedModel, settings: dict, summary: dict, notes: list[str]) -> AttackResult:
    reproduced = summary["reproduced"]
    summary["epsilon_lower_bound"] = "inf" if reproduced else None
    validity = (
        "an exact replay of the release from its seed is a deterministic distinguisher of any neighbouring pair: "
        "valid for every δ < 1, with no membership coin needed"
        if reproduced
        else "no seed tried reproduced the release: no bound"
    )
    return AttackResult(
        attack="seed-replay",
        auc=1.0 if reproduced else None,
        advantage=1.0 if reproduced else None,
        epsilon_lower_bound=math.inf if reproduced else None,
        epsilon_lower_bound_delta=float(model.privacy.delta) if reproduced else None,
        covered_by_guarantee=bool(model.privacy.is_private),
        settings=dict(settings),
        extra={"seed_replay": summary},
        notes=notes,
        model=C.model_summary(model),
        bound_valid=reproduced,
        bound_validity=validity,
    )
