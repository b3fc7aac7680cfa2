"""Regenerate mpdp/messages/*_pb2*.py from proto/ (run from anywhere; `make proto`).

tests/core/test_proto_drift.py regenerates into a temporary folder and fails when the
committed files differ.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def generate(out_dir: Path) -> list[Path]:
    from grpc_tools import protoc
    import grpc_tools

    protos = sorted((ROOT / "proto").rglob("*.proto"))
    include = Path(grpc_tools.__file__).parent / "_proto"
    args = ["protoc", f"-I{ROOT / 'proto'}", f"-I{include}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}"]
    args += [str(p) for p in protos]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    return protos


if __name__ == "__main__":
    generate(ROOT)
    print("generated into", ROOT / "mpdp" / "messages", file=sys.stderr)
