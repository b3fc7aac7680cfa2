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
    # Type stubs (.pyi) for the generated messages and stubs come from mypy-protobuf's plugins, installed beside
    # this interpreter (the `dev` extra).
    bindir = Path(sys.executable).parent
    args = ["protoc", f"-I{ROOT / 'proto'}", f"-I{include}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
            f"--plugin=protoc-gen-mypy={bindir / 'protoc-gen-mypy'}", f"--plugin=protoc-gen-mypy_grpc={bindir / 'protoc-gen-mypy_grpc'}",
            f"--mypy_out={out_dir}", f"--mypy_grpc_out={out_dir}"]
    args += [str(p) for p in protos]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    return protos


if __name__ == "__main__":
    generate(ROOT)
    print("generated into", ROOT / "mpdp" / "messages", file=sys.stderr)
