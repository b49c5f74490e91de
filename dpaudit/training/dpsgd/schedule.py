"""The DP-SGD schedule fixed before any private data is read (:class:`PoissonSchedule`: Poisson
rate, steps, the public normaliser of the noisy sum) and opacus' loader arithmetic it plans with."""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpaudit.errors import ConfigurationError


def poisson_sample_rate(num_examples: int, batch_size: int) -> float:
    """The sampling rate opacus uses for a loader of ``num_examples`` and ``batch_size``.

    Args:
        num_examples: number of examples n.
        batch_size: batch size B.

    Returns:
        q = 1/⌈n/min(B, n)⌉.
    """
    return 1.0 / math.ceil(num_examples / min(batch_size, num_examples))


def steps_for(num_examples: int, batch_size: int, epochs: int) -> int:
    """Number of steps of ``epochs`` epochs with opacus' loader rule, ⌈n/min(B, n)⌉ per epoch.

    Args:
        num_examples: number of examples n.
        batch_size: batch size B.
        epochs: number of epochs.

    Returns:
        The number of steps.
    """
    return epochs * math.ceil(num_examples / min(batch_size, num_examples))


@dataclass(frozen=True)
class PoissonSchedule:
    r"""A DP-SGD schedule fixed **before** any private data is read: Poisson rate q, number of
    steps, and the public normaliser of the noisy sum (the expected batch size).

    Under node-level DP the number of training examples n is private (add/remove one node
    changes it), so q = B/n, ⌈n/B⌉ steps per epoch or a division by ⌊nq⌋ would each let a
    neighbour be told apart through a public schedule or the weights' scale. Every field here
    comes from public hyperparameters and declared facts (:mod:`dpaudit.release`):

    * ``sample_rate`` given (a hyperparameter): q = sample_rate, ⌈1/q⌉ steps per epoch, the sum
      divided by ``batch_size`` (the expected batch the rate was chosen for);
    * else the declared training-set size n̂: q = 1/⌈n̂/B⌉, ⌈n̂/B⌉ steps per epoch (opacus'
      loader rule, on n̂), the sum divided by n̂·q.

    With neither, :meth:`plan` refuses (one line, before training): no size may be read.
    ``epochs`` splits the ``steps`` into equal epochs (``on_epoch`` callbacks run between them).

    Attributes:
        sample_rate: Poisson rate q in (0, 1].
        steps: total number of steps.
        expected_batch_size: the public normaliser of the noisy sum.
        source: where q came from (for records).
        epochs: number of equal epochs the steps are split into.
    """

    sample_rate: float
    steps: int
    expected_batch_size: float
    source: str
    epochs: int = 1

    def __post_init__(self) -> None:
        if not 0.0 < self.sample_rate <= 1.0:
            raise ConfigurationError(f"sample_rate must lie in (0, 1], got {self.sample_rate}")
        if self.epochs < 1 or self.steps < 1 or self.steps % self.epochs:
            raise ConfigurationError(
                f"a schedule of {self.steps} steps cannot be split into {self.epochs} equal epochs"
            )
        if not self.expected_batch_size > 0:
            raise ConfigurationError(f"expected_batch_size must be > 0, got {self.expected_batch_size}")

    @property
    def steps_per_epoch(self) -> int:
        return self.steps // self.epochs

    @classmethod
    def plan(
        cls, *, batch_size: int, epochs: int, declared_size: int | None, sample_rate: float | None = None
    ) -> PoissonSchedule:
        """The schedule from public inputs only (see the class docstring).

        Args:
            batch_size: expected batch size B.
            epochs: number of epochs.
            declared_size: declared training-set size n̂, or ``None``.
            sample_rate: the ``sample_rate`` hyperparameter, or ``None``.

        Returns:
            The schedule.

        Raises:
            ConfigurationError: ``sample_rate`` outside (0, 1], or neither it nor a declared size is given.
        """
        if sample_rate is not None:
            if not 0.0 < sample_rate <= 1.0:
                raise ConfigurationError(f"sample_rate must lie in (0, 1], got {sample_rate}")
            per_epoch = math.ceil(1.0 / sample_rate)
            return cls(
                float(sample_rate),
                int(epochs) * per_epoch,
                float(batch_size),
                "sample_rate hyperparameter",
                int(epochs),
            )
        if declared_size is None:
            raise ConfigurationError(
                "DP-SGD needs its Poisson rate fixed in advance: set the sample_rate hyperparameter, or declare the "
                "training-set size public (a registry benchmark does; for your own graph --dataset-option "
                "declare_num_train=N, or from_data(..., public_facts=...) in Python)"
            )
        n = int(declared_size)
        q = poisson_sample_rate(n, batch_size)
        return cls(
            q, steps_for(n, batch_size, epochs), float(int(n * q)), f"declared training-set size {n}", int(epochs)
        )

    def to_dict(self) -> dict:
        """JSON-able record: ``sample_rate``, ``steps``, ``expected_batch_size`` and ``source``."""
        return {
            "sample_rate": self.sample_rate,
            "steps": self.steps,
            "expected_batch_size": self.expected_batch_size,
            "source": self.source,
        }
