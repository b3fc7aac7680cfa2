"""services/common/memory.py: a kept exception keeps no request alive once its frames are forgotten."""

from __future__ import annotations

import gc
import weakref

from mpdp_services.common import memory


class _Request:
    """Stands for a received request (weak-referenceable, unlike bytes)."""


def _refuse(request: _Request) -> None:
    held = request  # noqa: F841 - a servicer's local, as a refusal's traceback keeps it
    raise ValueError("refused")


def _caught(request: _Request) -> BaseException:
    try:
        try:
            raise KeyError("earlier")
        except KeyError:
            _refuse(request)  # raised during another exception: its context's frames hold the request too
    except ValueError as e:
        return e
    raise AssertionError("unreachable")


def test_a_kept_exception_keeps_its_request_until_its_frames_are_forgotten():
    gc.disable()  # the cycle is what the cyclic collector would free some time later; the test asks for now
    try:
        request = _Request()
        gone = weakref.ref(request)
        kept = _caught(request)
        del request
        assert gone() is not None  # the traceback's frames hold it
        memory.forget_frames(kept)
        assert gone() is None
        assert str(kept) == "refused" and isinstance(kept.__context__, KeyError)  # the exception itself is intact
    finally:
        gc.enable()

