"""A pause of CPython's cyclic garbage collector around one bulk step (the scheduler's ledger rebuild and adoption).

A rebuild allocates many small objects that all live on, and each full collection would walk every one of them
again. Reference counting still frees every object that is not in a cycle. The pause is process-wide, so it is
taken only around a bounded step, and always restored on exit, also on error; it stays paused when it was paused
before.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """Disable the cyclic collector within the block (module docstring); restores the previous state. Raises
    whatever the block raises."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
