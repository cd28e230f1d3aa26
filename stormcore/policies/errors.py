"""The one error of a policy the lab cannot run (exit code 2)."""

from __future__ import annotations

from stormcore.errors import UsageError


class PolicyError(UsageError):
    """A retry policy the lab cannot run: not found, not meeting the protocol, raising, or
    answering nonsense; or a library configuration an adapter cannot map (exit code 2)."""
