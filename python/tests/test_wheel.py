"""Opt-in (FG_TEST_WHEEL=1; minutes: it compiles libfg): `pip wheel ./python` builds a wheel,
which installs into a fresh venv and runs there with no FG_LIBRARY and no compiler on PATH."""
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from conftest import SRC

pytestmark = pytest.mark.skipif(os.environ.get("FG_TEST_WHEEL") != "1",
                                reason="FG_TEST_WHEEL=1 builds the wheel (minutes)")

SMOKE = """
import sys, fg
from fg.tools import _synth
_synth("opt-tiny", sys.argv[1], sys.argv[2], seed=7)
with fg.LLM(sys.argv[1], ram_budget="1GiB", threads=1, max_ctx=64) as llm:
    out = llm.generate(["Hello"], fg.SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))
    assert len(out[0].token_ids) == 4, out
print("wheel ok", fg.__file__, fg.libfg_version, out[0].token_ids)
"""


def test_pip_wheel_installs_and_runs(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", str(SRC / "python"), "-w",
                    str(wheels)], check=True)
    whl = list(wheels.glob("fg_llm-*.whl"))
    assert len(whl) == 1, list(wheels.iterdir())
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(whl[0])], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("FG_LIBRARY", "PYTHONPATH")}
    env["PATH"] = str(env_dir / "bin")  # no compiler reachable
    r = subprocess.run([str(py), "-c", SMOKE, str(tmp_path / "s.store"),
                        str(SRC / "data/gpt2-tokenizer")], env=env, cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "wheel ok" in r.stdout and str(env_dir) in r.stdout
