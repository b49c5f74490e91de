"""User-facing errors.

Every problem caused by the user's input (unknown dataset, bad ε, a tampered model
directory, ...) is raised as a :class:`DPAuditError` subclass. The CLI prints such errors
as one line on stderr and exits with status 2; anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations


class DPAuditError(Exception):
    """Base class of every error caused by bad input rather than a bug."""


class DatasetError(DPAuditError):
    """A dataset is unknown, missing, malformed or unusable."""


class PrivacyParameterError(DPAuditError, ValueError):
    """An (ε, δ) target is invalid or cannot be reached."""


class ModelFormatError(DPAuditError):
    """A released-model directory is unreadable, tampered with or of an unknown kind."""


class ConfigurationError(DPAuditError, ValueError):
    """An unknown defense, attack, hyperparameter or split specification."""


class IntegrityError(ModelFormatError):
    """A released model's stated privacy guarantee does not match what its recorded mechanisms prove."""


class OutputExistsError(DPAuditError, FileExistsError):
    """An output (a released model, a report) is already there and replacing it was not asked for."""
