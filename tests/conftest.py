"""Suite-wide guards shared by unit, contract and integration tests.

A test that installs a handler on the root logger (a component container's ``logging`` resource) must remove it
before it ends: a handler left behind is removed later by garbage collection of its generator, from whatever
thread runs it, while another test's log call iterates the root logger's handlers — and that call then skips a
handler (``caplog`` misses a record). The guard fails the test that leaks instead of the one that suffers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


def _own_handlers() -> list[logging.Handler]:
    return [h for h in logging.getLogger().handlers if not type(h).__module__.startswith("_pytest")]


@pytest.fixture(autouse=True)
def _no_root_handler_leaks() -> Iterator[None]:
    before = _own_handlers()
    yield
    leaked = [h for h in _own_handlers() if h not in before]
    for handler in leaked:
        logging.getLogger().removeHandler(handler)
    assert not leaked, f"the test left {len(leaked)} handler(s) on the root logger: {leaked!r}"
