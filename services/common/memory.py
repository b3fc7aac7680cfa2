"""What a served call leaves behind: nothing of its request once it has ended, and no freed heap kept from the OS.

Two things kept a process large after authorised calls with bodies near the message limit (56 MB of a 64 MiB limit):

- **A refused call's request lived on in its traceback.** A refusal is an exception (``context.abort``); its
  traceback holds the frames it passed through, and they hold the request (the received bytes and the parsed
  message). Exception, traceback and frames form a reference cycle that only Python's cyclic collector frees, and it
  runs on counts of container objects, not on bytes: a member's refused 56 MB calls piled up by the dozen
  (a party grew to several GB). :func:`forget_frames` clears the locals of every finished frame of a traceback (and
  of the exceptions it was raised from), so what survives of a refusal is its status and text.
- **Freed memory stayed in the C allocator.** gRPC's core receives a message in many slices on its own threads; when
  they are freed, glibc keeps the pages of its heaps (and of other threads' arenas) for reuse and hands back only
  what lies at a heap's top. After a large call :func:`release` asks glibc to return every free page
  (``malloc_trim(0)``, which since glibc 2.8 also releases free pages inside the heaps). Its cost grows with the heap,
  so it runs only after a call whose body reached :data:`LARGE_BODY`; on another C library it does nothing.

The measured figures (a party's and the curator's RSS over 100 calls of 56 MB from a member certificate, before and
after) are in docs/protocols/job-model.md §1; tests/adversarial/test_member_bodies.py holds both to them.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from types import TracebackType
from typing import Callable

LARGE_BODY = 16 << 20  # bytes: a call that carried at least this much is followed by a trim (a validated ShareBatch is ≤ 8 MiB)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim from the process's own symbols (no library search: that would start ldconfig), looked up
    at the first large call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # musl and others: no malloc_trim
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release(body_bytes: int) -> None:
    """After a call that carried ``body_bytes`` has ended and dropped its request: give free heap pages back to the OS
    when the body was large (:data:`LARGE_BODY`)."""
    if body_bytes >= LARGE_BODY:
        trim = _malloc_trim()
        if trim is not None:
            trim(0)


def forget_frames(exc: BaseException | None) -> None:
    """Clear the locals of every finished frame in ``exc``'s traceback and in those of the exceptions it was raised
    from or during (``__cause__``, ``__context__``), so that keeping the exception keeps no request alive. A frame
    still running (the caller's own) cannot be cleared; the caller drops its own references."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        _clear(e.__traceback__)
        todo += [e.__cause__, e.__context__]


def _clear(tb: TracebackType | None) -> None:
    while tb is not None:
        try:
            tb.tb_frame.clear()
        except RuntimeError:  # a frame still executing
            pass
        tb = tb.tb_next
