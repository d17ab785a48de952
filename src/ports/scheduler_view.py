"""The scheduler-view port: the books a running scheduler replica holds (:mod:`domain.inspection.view`), read by
``ljrk inspect --scheduler`` to show where they differ from the API objects.

Errors are this port's own: :class:`SchedulerViewError` for a scheduler that cannot be reached, answers with an
error status, or serves something that is not a view; its message names the address and the cause.
"""

from __future__ import annotations

from typing import Protocol

from domain.inspection.view import SchedulerView


class SchedulerViewError(Exception):
    """The view could not be read; the message names the scheduler's address and why."""


class SchedulerViewSource(Protocol):
    """One scheduler replica's view."""

    def fetch(self) -> SchedulerView:
        """The replica's books now. Raises :class:`SchedulerViewError`."""
        ...
