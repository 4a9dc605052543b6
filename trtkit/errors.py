"""The project's error types. Library code raises these; only the CLI entry point catches them.

Every message names what is wrong and how to fix it.
"""

from __future__ import annotations


class TrtkitError(Exception):
    """Base class for errors a user can fix. The message is shown as one line."""


class ConfigError(TrtkitError):
    """A model config file is invalid: the message names the field path and the fix."""


class ModelSourceError(TrtkitError):
    """A model source cannot be found or loaded."""


class CalibrationError(TrtkitError):
    """Calibration or checkpoint export cannot proceed."""


class BuildError(TrtkitError):
    """An engine build cannot proceed (preflight failure, missing TensorRT-LLM, ...)."""


class RepositoryError(TrtkitError):
    """A Triton model repository is invalid or inconsistent."""


class ServerError(TrtkitError):
    """tritonserver failed to start, became unhealthy, or could not be stopped."""


class EngineError(TrtkitError):
    """The CPU reference engine rejected a request or cannot load a checkpoint."""


class ClientError(TrtkitError):
    """A client-side governance rule refused a request, or the server answered with an error."""


class BudgetExceededError(ClientError):
    """A token or cost budget would be exceeded; raised before the request is sent."""


class InputTooLongError(ClientError):
    """The prompt is longer than the configured hard input limit."""


class InvalidInputError(TrtkitError, ValueError):
    """A request input is outside its valid range (served models answer INVALID_ARGUMENT)."""


class StoreUnavailable(TrtkitError):
    """The governance store (keys, budgets, rate windows, usage ledger) cannot be reached: a PostgreSQL
    server that is down or refuses us, a SQLite file that cannot be opened or stays locked."""


class StoreNotFound(TrtkitError):
    """A command that only reads a store (``keys list``, ``usage``) was pointed at one that does not exist: it never
    creates one, so a mistyped path fails instead of reading a new empty database."""


class BenchError(TrtkitError):
    """A `trtkit bench` run cannot proceed (bad endpoint, load, workload or SLO option, unreadable run folder)."""
