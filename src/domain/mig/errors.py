"""Errors of the MIG domain; each names the model, field or value at fault (never a bare "not found")."""

from __future__ import annotations

from collections.abc import Iterable

from domain.errors import DomainError, InsufficientResourcesError, InvalidRequestError


class UnknownMigModelError(DomainError, ValueError):
    """A GPU product name matches no MIG profile table.

    Attributes: ``product`` (the NVML product name given), ``known`` (model keys with a table).
    """

    def __init__(self, product: str, known: Iterable[str], detail: str = "") -> None:
        self.product = product
        self.known = tuple(sorted(known))
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"gpu.model={product!r}: no MIG profile table for this GPU{extra}; known models: {', '.join(self.known)}"
        )


class UnknownMigProfileError(DomainError, ValueError):
    """A MIG profile name is not valid for a GPU model (failure case B30: reject at admission, never Pending).

    Attributes: ``model`` (model key, or a description of the models considered), ``name`` (as requested),
    ``valid`` (canonical profile names of the model), ``hint`` (e.g. the canonical spelling to use).
    """

    def __init__(self, model: str, name: str, valid: Iterable[str], hint: str = "") -> None:
        self.model = model
        self.name = name
        self.valid = tuple(valid)
        self.hint = hint
        extra = f"; {hint}" if hint else ""
        super().__init__(
            f"mig profile={name!r}: unknown profile for {model}{extra}; valid profiles: {', '.join(self.valid)}"
        )


class MigPlacementError(InvalidRequestError):
    """A GPU instance placement breaks the geometry or overlaps the books (bad start, overlap, too many).

    Same attributes as :class:`InvalidRequestError`: ``field``, ``value``, ``reason``. Raised before any change,
    so the books stay as they were.
    """


class NoMigCapacityError(InsufficientResourcesError):
    """No free instance or placement for a requested profile on the node; the books are unchanged."""
