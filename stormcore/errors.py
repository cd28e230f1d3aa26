"""The two kinds of failure every stormlab command reports, and their exit codes."""

from __future__ import annotations


class LabError(RuntimeError):
    """Something the user should read: the lab is already up, not up, did not start, or did
    not answer (exit code 1)."""

    exit_code = 1


class UsageError(ValueError):
    """Bad input: a setting, a fault request or a scenario the lab cannot take. Nothing was
    changed (exit code 2)."""

    exit_code = 2


EXIT_INVALID = 3  # a run that finished, but the host, not the model, shaped it (the demo's INVALID)
