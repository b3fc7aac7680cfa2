"""What a process received, message by message: the evidence for "this role never sees X" tests.

Test mode only (``MPDP_TRANSCRIPT=<folder>``, one ``<site>.jsonl`` per process; refused otherwise): the role interceptor records every request
that passes its role check (refused ones never reach a servicer) and :class:`~mpdp_services.common.rpc.PeerChannels` every response to a call it makes, as
one JSON line each (direction, method, peer site, message type, serialized bytes in base64).
"""

from __future__ import annotations

import base64
import json
import os
import threading
from pathlib import Path
from typing import Any

ENV = "MPDP_TRANSCRIPT"


class Transcript:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def record(self, direction: str, method: str, peer: str, message: Any) -> None:
        line = json.dumps({
            "direction": direction,
            "method": method,
            "peer": peer,
            "type": message.DESCRIPTOR.full_name,
            "data": base64.b64encode(message.SerializeToString()).decode(),
        })
        with self._lock, open(self.path, "a") as fh:
            fh.write(line + "\n")


def from_env(test_mode: bool, site: str) -> Transcript | None:
    folder = os.environ.get(ENV)
    if not folder:
        return None
    if not test_mode:
        raise SystemExit(f"{ENV} records every message this process receives; it is refused outside test mode")
    return Transcript(Path(folder) / f"{site}.jsonl")


def read(path: str | Path) -> list[dict]:
    """The recorded lines, each with the decoded message under "message"."""
    from google.protobuf import symbol_database

    import mpdp.messages  # noqa: F401  (registers the message types)

    db = symbol_database.Default()
    out = []
    for line in Path(path).read_text().splitlines():
        rec = json.loads(line)
        cls = db.GetSymbol(rec["type"])
        rec["message"] = cls.FromString(base64.b64decode(rec["data"]))
        out.append(rec)
    return out
