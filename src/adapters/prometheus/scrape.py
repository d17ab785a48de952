"""Read a Prometheus ``/metrics`` page over HTTP, as a scraper does (``ljrk up`` compares what the exporter serves
with the Runtime's records and the scheduler's ledger).

:func:`scrape` GETs the page (stdlib ``urllib``) and parses the text exposition format with
``prometheus_client.parser``; every sample comes back as a :class:`Sample` (counters keep their ``_total`` name as
written on the page). Failures — connection refused, a timeout, an HTTP error status, a page that does not parse —
raise :class:`ScrapeError` naming the URL.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping

import attrs
from prometheus_client.parser import text_string_to_metric_families


class ScrapeError(Exception):
    """The page could not be fetched or parsed; the message names the URL and the cause."""


@attrs.frozen
class Sample:
    """One sample of a page: series ``name``, its ``labels`` and ``value`` (a float; counters and gauges alike)."""

    name: str
    labels: Mapping[str, str]
    value: float


def parse_page(text: str) -> tuple[Sample, ...]:
    """The samples of a text-format page, in page order. Raises :class:`ScrapeError` when it does not parse."""
    try:
        return tuple(Sample(s.name, dict(s.labels), float(s.value))
                     for family in text_string_to_metric_families(text) for s in family.samples)
    except ValueError as error:
        raise ScrapeError(f"not a Prometheus text page: {error}") from error


def scrape(url: str, *, timeout_s: float = 5.0) -> tuple[Sample, ...]:
    """GET ``url`` (``http://host:port/metrics``) within ``timeout_s`` seconds and parse it. Raises
    :class:`ScrapeError`."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = response.read().decode("utf-8")
    except (urllib.error.URLError, OSError, UnicodeDecodeError) as error:
        raise ScrapeError(f"GET {url}: {error}") from error
    try:
        return parse_page(body)
    except ScrapeError as error:
        raise ScrapeError(f"GET {url}: {error}") from error
