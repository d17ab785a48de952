"""Domain error hierarchy.

Every error that comes from bad input names the field and the offending value, so an operator can find the
pod or node annotation at fault without reading code.
"""

from __future__ import annotations


class DomainError(Exception):
    """Base class of every error raised by the domain layer."""


class InvalidRequestError(DomainError, ValueError):
    """A resource request or inventory value is malformed (zero, negative, non-integer, out of range).

    Attributes: ``field`` (dotted field name), ``value`` (the rejected value), ``reason`` (why).
    """

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}={value!r}: {reason}")


class UnknownPolicyError(DomainError, ValueError):
    """A scheduling policy or tie-break rule name is not registered (raised at configuration time)."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"policy={name!r}: unknown policy; known policies: {', '.join(sorted(known))}")


class InsufficientResourcesError(DomainError):
    """A reservation does not fit the node's free resources; the ledger is left unchanged."""


class UnknownNodeError(DomainError, KeyError):
    """A node name is not in the ledger."""

    def __str__(self) -> str:
        return f"node={self.args[0]!r}: not in the ledger"


class LedgerCorruptedError(DomainError):
    """The ledger's running totals disagree with its own allocation records, or exceed capacity.

    A corrupted node is quarantined: it admits no pod until :meth:`ClusterLedger.repair` rebuilds it.
    """
