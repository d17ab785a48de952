"""Structured logs for the long-running components: one JSON object per line on stderr.

Each line carries ``ts`` (RFC 3339, UTC), ``level``, ``logger``, ``msg`` and the fields given with
``extra=fields(pod="ns/name", node="n1")``; an exception adds ``error``. JSON lines are what log collectors in a
cluster (Fluent Bit, Vector, Loki) parse without configuration. :func:`configure_logging` is a generator so a
dependency-injector ``Resource`` can install the handler and remove it at shutdown.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from collections.abc import Iterator
from typing import TextIO

_FIELDS = "ljrk_fields"


def fields(**values: object) -> dict[str, object]:
    """``extra=`` argument for a log call attaching ``values`` as top-level JSON keys."""
    return {_FIELDS: values}


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object (module docstring); values that are not JSON become strings."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line (no trailing newline)."""
        line: dict[str, object] = {
            "ts": dt.datetime.fromtimestamp(record.created, tz=dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        extra = getattr(record, _FIELDS, None)
        if isinstance(extra, dict):
            line.update(extra)
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def configure_logging(level: str = "INFO", stream: TextIO | None = None) -> Iterator[logging.Handler]:
    """Install a JSON-lines handler on the root logger at ``level`` (a logging level name) writing to ``stream``
    (default stderr); yields it and removes it again when resumed. Raises ValueError for an unknown level."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(level.upper())
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
