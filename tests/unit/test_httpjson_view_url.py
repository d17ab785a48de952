"""The scheduler-view adapter's URL rule (adapters.httpjson.view_url): the listener, its ``/metrics`` URL or the
view's own URL all name ``<listener>/debug/ledger``; anything but an http(s) URL with a host is refused, naming
the flag and the value."""

from __future__ import annotations

import pytest

from adapters.httpjson import HttpSchedulerView, view_url
from ports.scheduler_view import SchedulerViewError


@pytest.mark.parametrize(("given", "expected"), [
    ("http://127.0.0.1:8888", "http://127.0.0.1:8888/debug/ledger"),
    ("http://127.0.0.1:8888/", "http://127.0.0.1:8888/debug/ledger"),
    ("http://127.0.0.1:8888/metrics", "http://127.0.0.1:8888/debug/ledger"),
    ("https://sched.kube-system:8888/debug/ledger", "https://sched.kube-system:8888/debug/ledger"),
    ("http://proxy/ns/sched/", "http://proxy/ns/sched/debug/ledger"),
    (" http://h:1?x=1 ", "http://h:1/debug/ledger"),
])
def test_view_url_forms(given: str, expected: str) -> None:
    assert view_url(given) == expected


@pytest.mark.parametrize("given", ["127.0.0.1:8888", "ftp://h/", "http://", ""])
def test_view_url_refuses_what_is_not_an_http_url(given: str) -> None:
    with pytest.raises(SchedulerViewError, match=r"--scheduler=.*must be an http:// or https:// URL"):
        view_url(given)
    with pytest.raises(SchedulerViewError):
        HttpSchedulerView(given)
