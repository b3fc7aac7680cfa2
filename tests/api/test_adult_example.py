"""examples/adult/run.sh as a user runs it: the Adult data split three ways, a local federation of separate
processes with the schema, a Pathak job at ε = 1, scored on adult.test; one JSON object, accuracy ≥ 0.80.

It reads ../shared/data/adult beside the repository and fails (never skips) when the files are missing. The
test runs the federation with 1024-bit keys (KEY_BITS, which puts it in test mode) to stay well under a minute;
the example's default is 2048 bits, and the encoding, the protocol and the noise are the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpdp.schema import Schema
from tests.conftest import shared_file

REPO = Path(__file__).resolve().parents[2]
ADULT = REPO / "examples" / "adult"

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_adult_run_prints_one_json_object_with_accuracy_at_least_080():
    shared_file("adult", "adult.data.gz"), shared_file("adult", "adult.test.gz")  # fail, never skip, without the data
    env = dict(os.environ, PYTHON=sys.executable, KEY_BITS="1024")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("MPDP_DATA", None)  # the script must find ../shared itself
    out = subprocess.run(["bash", str(ADULT / "run.sh")], capture_output=True, text=True, env=env, timeout=240, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, out.stdout
    doc = json.loads(lines[0])
    assert doc["epsilon"] == 1.0 and doc["mode"] == "gaussian-distributed" and doc["parties"] == 3
    assert doc["test_rows"] == 16281 and doc["dimension"] == Schema.load(ADULT / "schema.yaml").dimension
    assert doc["schema_sha256"] == Schema.load(ADULT / "schema.yaml").sha256()
    assert doc["accuracy"] >= 0.80, doc
