"""Architecture checks: the core imports no network code; generated code matches proto/; messages round-trip."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = {"grpc", "socket", "asyncio", "ssl", "http", "urllib", "requests", "services", "mpdp_services"}


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_core_has_no_network_imports():
    offenders = []
    for path in (REPO / "mpdp").rglob("*.py"):
        if path.name.endswith("_pb2_grpc.py"):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for n in names:
                if n.split(".")[0] in FORBIDDEN or n.endswith("_pb2_grpc"):
                    offenders.append(f"{path.relative_to(REPO)}: {n}")
    assert not offenders, offenders


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
    return out


ROOMS = {"cli", "common", "compute_node", "curator", "dca_client", "launcher", "operator", "party", "provisioning"}
SERVERS = {"curator", "party", "compute_node"}


@pytest.mark.slow  # seconds to minutes: not in `make test-fast`
def test_services_rooms():
    """services/ has only rooms (janus: one crate per role); no module outside the CLI imports the CLI; servers
    import no operator client, launcher or provisioning code; nothing imports a private name of another room."""
    top = {p.name for p in (REPO / "services").iterdir() if not p.name.startswith(("_", "."))}
    assert top == ROOMS, f"services/ holds files or rooms outside the plan: {sorted(top ^ ROOMS)}"
    offenders = []
    for path in (REPO / "services").rglob("*.py"):
        room = path.relative_to(REPO / "services").parts[0]
        tree = ast.parse(path.read_text())
        for n in _imports(path):
            parts = n.split(".")
            if parts[0] != "mpdp_services" or len(parts) < 2:
                continue
            if parts[1] == "cli" and room != "cli":
                offenders.append(f"{path.relative_to(REPO)} imports the CLI ({n})")
            if room in SERVERS and parts[1] in {"operator", "launcher", "provisioning", "cli"}:
                offenders.append(f"{path.relative_to(REPO)} (a server) imports {n}")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mpdp_services.") and node.module.split(".")[1] != room:
                offenders += [f"{path.relative_to(REPO)} imports private {a.name} from {node.module}" for a in node.names if a.name.startswith("_")]
    assert not offenders, offenders


def test_generated_code_matches_proto(tmp_path):
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import gen_proto
    finally:
        sys.path.pop(0)
    gen_proto.generate(tmp_path)
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.py"))
    assert generated, "protoc generated nothing"
    for rel in generated:
        committed = REPO / rel
        assert committed.exists(), f"{rel} is generated from proto/ but not committed: run `make proto`"
        assert _unversioned(tmp_path / rel) == _unversioned(committed), f"{rel} drifted from proto/: run `make proto`"


# The version stamps protoc and the gRPC plugin write (the tools' own release, not the proto's content): a fresh install
# may take a newer grpcio-tools than the one that generated the committed files, and the code is the same.
_STAMPS = (
    (re.compile(r"GRPC_GENERATED_VERSION = '[^']*'"), "GRPC_GENERATED_VERSION = 'X'"),
    (re.compile(r"# Protobuf Python Version: \S+"), "# Protobuf Python Version: X"),
    (re.compile(r"(_runtime_version\.Domain\.PUBLIC,)\s*\d+,\s*\d+,\s*\d+,"), r"\1 X,"),
)


def _unversioned(path: Path) -> str:
    text = path.read_text()
    for pattern, replacement in _STAMPS:
        text = pattern.sub(replacement, text)
    return text


def _all_messages():
    from mpdp.messages import common_pb2, contribution_pb2, dca_pb2, hamm2016_pb2, learner_pb2, local_release_pb2, pathak2010_pb2

    for mod in (common_pb2, pathak2010_pb2, dca_pb2, contribution_pb2, local_release_pb2, hamm2016_pb2, learner_pb2):
        for name, desc in mod.DESCRIPTOR.message_types_by_name.items():
            yield getattr(mod, name)


def _fill(msg, depth=0):
    for f in msg.DESCRIPTOR.fields:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            continue
        repeated = hasattr(getattr(msg, f.name), "append") or hasattr(getattr(msg, f.name), "add")
        if f.message_type is not None:
            if depth < 2:
                sub = getattr(msg, f.name).add() if repeated else getattr(msg, f.name)
                _fill(sub, depth + 1)
            continue
        v = {f.TYPE_STRING: "x", f.TYPE_BYTES: b"\x01\x02", f.TYPE_BOOL: True, f.TYPE_DOUBLE: 1.5, f.TYPE_FLOAT: 1.5, f.TYPE_ENUM: 1}.get(f.type, 7)
        if repeated:
            getattr(msg, f.name).append(v)
        else:
            setattr(msg, f.name, v)


@pytest.mark.parametrize("cls", list(_all_messages()), ids=lambda c: c.DESCRIPTOR.full_name)
def test_message_round_trip(cls):
    m = cls()
    _fill(m)
    assert cls.FromString(m.SerializeToString()) == m
