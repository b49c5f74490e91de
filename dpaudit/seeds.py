"""The seeds dpaudit accepts, checked before any work (a light module: the command line's
parser imports it).

A seed reaches Python's, NumPy's and torch's generators and scikit-learn's ``random_state``
(the attacks' MLPs, t-SNE), which takes ``0 <= seed < 2**32``; the attacks and defenses derive
further seeds by adding offsets (``seed + 7919 * run``, ``seed + 104729 * shadow``,
``seed + 2_000_003``), so a seed is kept below ``2**31`` to leave them room.
"""

from __future__ import annotations

import operator

from dpaudit.errors import ConfigurationError

#: the seeds a user gives are integers in ``[0, SEED_LIMIT)``
SEED_LIMIT = 2**31
#: what a defense accepts (torch's generators take 64 bits): a user's seed plus the offsets
#: derived from it (shadow models train with ``seed + 7919 * run + 104729 * shadow``)
DERIVED_SEED_LIMIT = 2**63


def check_seed(value, what: str = "--seed", limit: int = SEED_LIMIT) -> int:
    """``value`` as a seed in ``[0, limit)``, or one clear error naming ``what``.

    Args:
        value: an int, numpy/torch integer or a numeric string.
        what: the name in the error message.
        limit: exclusive upper bound.

    Returns:
        The seed as an int.

    Raises:
        ConfigurationError: not an integer, or outside ``[0, limit)``.
    """
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            pass
    if not isinstance(value, bool) and not isinstance(value, int):
        try:
            value = operator.index(value)  # numpy and torch integers
        except TypeError:
            pass
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{what} must be an integer in {_range(limit)}, got {value!r}")
    if not 0 <= value < limit:
        raise ConfigurationError(f"{what} must be an integer in {_range(limit)} = [0, {limit - 1}], got {value}")
    return value


def _range(limit: int) -> str:
    return f"[0, 2**{limit.bit_length() - 1})"


def seed_argument(text: str) -> int:
    """argparse ``type=`` of every ``--seed``: a bad one is the parser's one-line error (exit 2).

    Args:
        text: the command-line value.

    Returns:
        The seed.

    Raises:
        argparse.ArgumentTypeError: not a seed in ``[0, 2**31)``.
    """
    import argparse

    try:
        return check_seed(text, "seed")
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("seed ")) from None
