"""Talking to the Hugging Face Hub: which failed calls are worth another try, and bounded retries.

``huggingface_hub`` (2.4) retries some calls itself (the tree listing, the HEAD
of a file) and not others (the branch listing, the model info that
``snapshot_download`` starts with, a file's GET). Worse, ``snapshot_download``
turns a 5xx answer or a lost connection into ``LocalEntryNotFoundError`` ("nothing
cached"), a subclass of ``EntryNotFoundError`` — the error a missing file
raises. ``transient_hub_error`` tells them apart by the cause;
``with_hub_retries`` retries a call on those only, a bounded number of times.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

#: Tries of one hub call before its error stands; the waits between them double from ``HUB_WAIT`` s.
HUB_TRIES = 3
HUB_WAIT = 2.0
#: HTTP statuses worth another try (the ones huggingface_hub's own backoff retries).
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})

T = TypeVar("T")


def transient_hub_error(exc: BaseException) -> bool:
    """Whether a failed hub call may succeed if tried again.

    Yes for an HTTP 408/429/5xx answer, a network error, and huggingface_hub's
    ``LocalEntryNotFoundError`` when it stands for "the hub answered 5xx or not at
    all, and nothing is cached" (``snapshot_download`` and ``hf_hub_download`` turn
    those into it). No for offline mode, a missing repository, revision or file,
    and anything else the hub refused.
    """
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

    if isinstance(exc, OfflineModeIsEnabled) or isinstance(exc.__cause__, OfflineModeIsEnabled):
        return False
    if isinstance(exc, HfHubHTTPError):
        return exc.response is not None and exc.response.status_code in TRANSIENT_STATUS
    if isinstance(exc, LocalEntryNotFoundError):
        return exc.__cause__ is None or transient_hub_error(exc.__cause__)
    return isinstance(exc, httpx2.TransportError | ConnectionError | TimeoutError)


def with_hub_retries(call: Callable[[], T], tries: int = HUB_TRIES, wait: float = HUB_WAIT) -> T:
    """``call()``, tried again after a transient hub error (``transient_hub_error``) up to ``tries``
    times in all, waiting ``wait``, 2 × ``wait``, … in between; any other error is raised at once."""
    if tries < 1:
        raise ValueError(f"tries must be >= 1, got {tries}")
    for attempt in range(tries):
        try:
            return call()
        except Exception as exc:
            if attempt + 1 >= tries or not transient_hub_error(exc):
                raise
        time.sleep(wait * 2**attempt)
    raise AssertionError("unreachable: the last try returns or raises")
