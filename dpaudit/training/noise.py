r"""Where privacy noise comes from: one source every mechanism takes its generators from.

A differential-privacy guarantee holds only while the noise is secret. Noise drawn from
``--seed`` is not: ``--seed`` defaults to 0 and is below 2³¹, so an adversary holding the
neighbouring pair (D, D′) re-trains with the seed and compares the release bit for bit — an
exact membership test — and a secret seed is found by brute force from any released noisy
statistic (issue 46). So, by default, every privacy-noise draw and every private sampling coin
(DP-SGD's Gaussian noise and Poisson batches, GCON's objective, AMP and homophily noise, GAP's
aggregation noise, DPAR's and DP-GNN's noise and sampling, the private selection's draws) comes
from the operating system's entropy (:func:`secrets.randbits`): each generator is seeded with
64 (torch) or 128 (NumPy) fresh bits that are never written anywhere, as Opacus' ``secure_mode``
and Google's DP libraries do. The seed keeps driving what users need it for: splits,
initialisation, non-private randomness and the audit's coins.

Two modes (:data:`NOISE_CHOICES`), a defense's ``noise`` argument
(``dpaudit train --reproducible-noise`` = ``noise="seeded"``):

* ``secure`` (the default): generators seeded from OS entropy. Two runs of the same command
  release different weights.
* ``seeded``: the generators the seed gives (the stream each mechanism drew before this module
  existed), so a run can be repeated exactly — for research and the test suite only. The model
  card records ``"noise": "seeded"`` and ``dpaudit inspect``, the audit and the report flag it
  as *seeded noise — not a release* (:data:`SEEDED_FLAG`).

The test suite asks for seeded noise explicitly through the environment variable
:data:`NOISE_ENV` (``DPAUDIT_NOISE=seeded``, set by ``tests/conftest.py``); it is read only when a
defense is given no ``noise`` argument and is recorded on the card like the flag.

Torch's CPU generator is a Mersenne Twister: its 64-bit seed is out of reach of a brute force,
but it is not a cryptographic generator — its state could be learned from its raw outputs,
which no release here exposes (the noise is only ever added to data-dependent values).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from dpaudit.errors import ConfigurationError
from dpaudit.training.constraints import Options, check

SECURE = "secure"
SEEDED = "seeded"
NOISE_CHOICES = (SECURE, SEEDED)
#: the declared constraint of a defense's ``noise`` argument (:mod:`dpaudit.training.constraints`)
NOISE_CONSTRAINTS = [Options(*NOISE_CHOICES), None]
#: the environment variable the test suite sets to ask for seeded noise (``DPAUDIT_NOISE=seeded``)
NOISE_ENV = "DPAUDIT_NOISE"
#: the one-line flag ``inspect``, the audit result and the report show for a seeded-noise model
SEEDED_FLAG = "seeded noise — not a release (its privacy noise can be replayed from the seed)"

Entropy = int | Sequence[int]


def _secure_bits(bits: int) -> int:
    return secrets.randbits(bits)


@dataclass(frozen=True)
class NoiseSource:
    """The generators a mechanism draws its privacy noise and private sampling coins from.

    In ``seeded`` mode each call returns the generator the caller's seed gives; in ``secure``
    mode a generator seeded from fresh OS entropy, whatever the seed (never recorded)."""

    mode: str = SECURE

    @property
    def seeded(self) -> bool:
        """Whether the noise can be reproduced from the seed (not a release)."""
        return self.mode == SEEDED

    def torch(self, seeded: int | torch.Generator) -> torch.Generator:
        """A CPU torch generator for privacy noise or private sampling.

        Args:
            seeded: what ``seeded`` mode uses: a seed, or a seeded generator that is returned
                itself (the stream continues as before). Ignored in ``secure`` mode.

        Returns:
            The generator: seeded, or seeded with 64 bits of OS entropy.
        """
        if self.seeded:
            if isinstance(seeded, torch.Generator):
                return seeded
            return torch.Generator().manual_seed(int(seeded))
        return torch.Generator().manual_seed(_secure_bits(64))

    def numpy(self, entropy: Entropy) -> np.random.Generator:
        """A NumPy generator for privacy noise or private sampling.

        Args:
            entropy: what ``seeded`` mode seeds ``SeedSequence`` with (an int or a list of ints).
                Ignored in ``secure`` mode.

        Returns:
            ``Generator(PCG64(SeedSequence(entropy)))``, or of 128 bits of OS entropy.
        """
        if self.seeded:
            return np.random.default_rng(np.random.SeedSequence(entropy))
        return np.random.default_rng(np.random.SeedSequence(_secure_bits(128)))

    def fresh_seed(self, bits: int = 62) -> int:
        """A seed for a fresh release made after training (e.g. a query answered at inference):
        torch's global RNG in ``seeded`` mode (what ``seed_everything`` set), OS entropy otherwise.

        Args:
            bits: the seed's width.

        Returns:
            An integer in ``[0, 2**bits)``.
        """
        if self.seeded:
            return int(torch.randint(0, 2**bits, (1,)).item())
        return _secure_bits(bits)


def noise_source(mode: str | None = None) -> NoiseSource:
    """The source for a defense's ``noise`` argument.

    Args:
        mode: ``"secure"``, ``"seeded"``, or ``None``: ``seeded`` when the environment variable
            :data:`NOISE_ENV` says so (the test suite), else ``secure``.

    Returns:
        The :class:`NoiseSource`.

    Raises:
        ConfigurationError: an unknown mode (argument or environment variable).
    """
    if mode is None:
        mode = os.environ.get(NOISE_ENV, "").strip().lower() or SECURE
        bad = check(NOISE_ENV, mode, NOISE_CONSTRAINTS[:1])
    else:
        bad = check("noise", mode, NOISE_CONSTRAINTS[:1])
    if bad:
        raise ConfigurationError(bad)
    return NoiseSource(mode)


def card_noise_mode(card: dict) -> str:
    """The noise mode a model card records (``card["noise"]``); a card without one (an
    adapter's, or one saved before the field) is read as ``secure``.

    Args:
        card: the public card (``model.json``'s ``card``).

    Returns:
        ``"secure"`` or ``"seeded"``.
    """
    mode = card.get("noise") if isinstance(card, dict) else None
    return SEEDED if mode == SEEDED else SECURE


def seeded_flag(card: dict) -> str | None:
    """:data:`SEEDED_FLAG` when ``card`` records seeded noise, else ``None`` (what ``inspect``,
    the audit result and the report print).

    Args:
        card: the public card.

    Returns:
        The flag or ``None``.
    """
    return SEEDED_FLAG if card_noise_mode(card) == SEEDED else None
