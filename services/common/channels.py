"""What a client needs to reach a service: the channel options (message limits, keepalive) and the TLS files.

Kept apart from services/common/rpc.py (the servers' interceptor, health, metrics and traces), so an operator's
command that makes one call imports gRPC and nothing else of the services (`benchmarks/cli_startup.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

MAX_MESSAGE = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.keepalive_time_ms", 30000),
]


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    ca: Path

    def read(self) -> tuple[bytes, bytes, bytes]:
        missing = [str(p) for p in (self.cert, self.key, self.ca) if not Path(p).exists()]
        if missing:
            raise FileNotFoundError(f"TLS files missing: {', '.join(missing)}; run `mpdp provision` or check the config paths")
        return Path(self.cert).read_bytes(), Path(self.key).read_bytes(), Path(self.ca).read_bytes()

    def server_credentials(self) -> grpc.ServerCredentials:
        cert, key, ca = self.read()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        cert, key, ca = self.read()
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
