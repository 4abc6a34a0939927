"""The examples users run first, run as they are: a failure here is a failure of the README."""
import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"


def test_kv_prefill_decode_moves_every_block_intact():
    pytest.importorskip("torch", reason="the example keeps its KV cache in torch tensors: torch is not installed")
    out = subprocess.run([sys.executable, str(EXAMPLES / "kv_prefill_decode.py")], env=dict(os.environ),
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "decode: request 2: 352 blocks checked, 0 wrong" in out.stdout, out.stdout
    assert out.stdout.rstrip().endswith("every block of every request arrived intact"), out.stdout
