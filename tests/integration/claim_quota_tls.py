"""TLS pieces of the claim quota webhook's tests: a CA and a serving certificate for 127.0.0.1 (openssl, through
``k8s_harness.make_pki``: :func:`webhook_pki`) and HTTPS GET/POST verified against that CA."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

from k8s_harness import make_pki


def webhook_pki(folder: Path) -> tuple[Path, Path, Path]:
    """(CA, serving certificate, key) for 127.0.0.1, made in ``folder``."""
    ca, crt, key, _ = make_pki(folder)
    return ca, crt, key


def _context(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


def get(url: str, ca: Path) -> tuple[int, bytes]:
    """(status, body) of an HTTPS GET."""
    try:
        with urllib.request.urlopen(url, context=_context(ca), timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def post(url: str, body: bytes, ca: Path) -> tuple[int, bytes]:
    """(status, body) of an HTTPS POST of JSON ``body``."""
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, context=_context(ca), timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
