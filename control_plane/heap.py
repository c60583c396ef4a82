"""Keep Python's cycle collector out of the way of big, short-lived allocation bursts.

Loading 10,000 routes creates millions of objects; with the collector running, parsing
took 2.3 s instead of 0.5 s, and full collections over the live model paused the
process for 250–650 ms at random moments during later changes. So:

- bulk work (parsing a commit, translating) runs with the collector paused;
- after a snapshot is published, everything alive is frozen (``gc.freeze``, a list
  splice): the long-lived model is never scanned again. Our model objects hold no
  reference cycles, so reference counting still frees them when replaced. No collection
  runs first: at 10k routes that one ``gc.collect()`` held the event loop for 190 ms;
- every ``FULL_COLLECTION_EVERY`` settles, the frozen set is collected once, so a cycle
  that did slip in cannot accumulate without bound. That collection is the one pause
  left (about 190 ms at 10k routes, once per 100 route changes).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

FULL_COLLECTION_EVERY = 100

_lock = threading.Lock()
_paused = 0
_settles = 0


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause cyclic GC for the block; nests, and is safe from several threads."""
    global _paused
    with _lock:
        _paused += 1
        if _paused == 1:
            gc.disable()
    try:
        yield
    finally:
        with _lock:
            _paused -= 1
            if _paused == 0:
                gc.enable()


def settle() -> None:
    """Collect what the last burst left behind, then freeze the survivors."""
    global _settles
    _settles += 1
    if _settles % FULL_COLLECTION_EVERY == 0:
        gc.unfreeze()
        gc.collect()
    gc.freeze()
