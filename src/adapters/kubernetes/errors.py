"""Error translation at the client boundary: every call of this adapter runs inside :func:`api_errors`.

``ApiException`` becomes the port's error for its HTTP status (:func:`~.translate.cluster_error`); transport
failures (``urllib3.exceptions.HTTPError`` — connect and read timeouts, ``MaxRetryError``, protocol errors of a
broken stream — and ``OSError``, ``TimeoutError`` included) become :class:`~ports.cluster.UnavailableError`. Both
are chained with ``raise … from``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as TransportError

from ports.cluster import UnavailableError

from .translate import cluster_error


@contextlib.contextmanager
def api_errors(what: str) -> Iterator[None]:
    """Translate the client's exceptions raised inside the block (module docstring); ``what`` names the call in
    the message. Raises :class:`~ports.cluster.ClusterError` subclasses only."""
    try:
        yield
    except ApiException as exc:
        raise cluster_error(exc, what) from exc
    except (TransportError, OSError) as exc:  # TimeoutError and socket errors are OSErrors
        raise UnavailableError(f"{what}: API server unavailable: {type(exc).__name__}: {str(exc)[:300]}") from exc
