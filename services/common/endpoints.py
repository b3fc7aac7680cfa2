"""Where the federation's curator is and which TLS files reach it: read from ``endpoints.json`` (written by
`mpdp federation up` or `mpdp provision`) or given explicitly. Shared by the operator clients, the DCA client
library and the parties (which reach the curator's DCA service the same way)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mpdp_services.common.channels import TlsFiles


class EndpointsError(FileNotFoundError):
    """No usable endpoints file: says where it looked and what to do."""


@dataclass
class Endpoints:
    curator_address: str
    curator_name: str
    tls: TlsFiles

    @classmethod
    def load(cls, path: str | Path) -> "Endpoints":
        p = Path(path)
        if p.is_dir():
            p = p / "endpoints.json"
        if not p.exists():
            raise EndpointsError(f"{p} not found: start a federation with `mpdp federation up`, or pass --endpoints "
                                 "(or set MPDP_ENDPOINTS) to the endpoints.json of yours")
        try:
            d = json.loads(p.read_text())
            t = d["operator_tls"]
            d["curator"]["address"], d["curator"]["name"]
        except (ValueError, KeyError, TypeError) as e:
            raise EndpointsError(f"{p} is not an endpoints file (JSON with curator and operator_tls): {e}") from None
        here = p.resolve().parent  # relative TLS paths (as `mpdp provision` writes them) are relative to this file
        return cls(d["curator"]["address"], d["curator"]["name"], TlsFiles(*(here / t[k] for k in ("cert", "key", "ca"))))
