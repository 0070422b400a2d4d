"""Fixtures of the fg package's tests: stores made once per session in a temporary directory,
and fg-infer run on the same inputs for comparison.

Environment (python/CMakeLists.txt sets it for ctest): FG_LIBRARY (the build's libfgpy.so, which
the package loads), FG_INFER (the build's fg-infer), FG_FIXTURES (the assembled test fixtures),
FG_SOURCE_DIR (the repository).
"""
import json
import lzma
import os
import shutil
import subprocess
from pathlib import Path

import sys

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package
SRC = Path(os.environ.get("FG_SOURCE_DIR", Path(__file__).resolve().parents[2]))
FIX = Path(os.environ.get("FG_FIXTURES", SRC / "build/tests/fixtures"))
QWEN = "Qwen__Qwen2.5-0.5B-Instruct"

import fg  # noqa: E402 - after the paths: the import itself is under test (no compiler needed)
from fg.tools import _synth  # noqa: E402


@pytest.fixture(scope="session")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("fg")


@pytest.fixture(scope="session")
def tiny_store(work):
    """opt-tiny's shape with random weights (seed 7) and GPT-2's tokenizer."""
    d = work / "tiny.store"
    _synth("opt-tiny", str(d), str(SRC / "data/gpt2-tokenizer"), seed=7)
    return str(d)


@pytest.fixture(scope="session")
def spare_stores(work):
    """Two more opt-tiny stores (seeds 8 and 9) that no session-wide LLM holds open: a store
    is opened by one handle per process, so tests opening their own LLMs use these."""
    out = []
    for seed in (8, 9):
        d = work / f"spare{seed}.store"
        _synth("opt-tiny", str(d), str(SRC / "data/gpt2-tokenizer"), seed=seed)
        out.append(str(d))
    return out


@pytest.fixture(scope="session")
def austen_store(work):
    """The shipped model (models/austen-opt: OPT, 4 layers, its own BPE tokenizer)."""
    d = work / "austen.store"
    fg.convert(str(SRC / "models/austen-opt"), str(d), progress=False)
    return str(d)


@pytest.fixture(scope="session")
def qwen_ckpt(work):
    """Qwen2.5-0.5B-Instruct's published tokenizer and chat template over a shrunk config with
    random weights (tests/fixtures/real-tiny), as the hub lays a checkpoint out."""
    tiny, real = FIX / "real-tiny" / QWEN, FIX / "real" / QWEN
    if not tiny.is_dir() or not real.is_dir():
        pytest.skip(f"fixtures missing under {FIX} (make fg_fixtures)")
    d = work / "qwen"
    d.mkdir()
    for src in list(real.iterdir()) + list(tiny.iterdir()):  # tiny config wins
        if src.suffix == ".xz":
            (d / src.stem).write_bytes(lzma.decompress(src.read_bytes()))
        elif src.suffix == ".json":
            shutil.copy(src, d / src.name)
    return d


@pytest.fixture(scope="session")
def qwen_store(work, qwen_ckpt):
    d = work / "qwen.store"
    fg.convert(str(qwen_ckpt), str(d), progress=False)
    return str(d)


@pytest.fixture(scope="session")
def tiny_llm(tiny_store):
    with fg.LLM(tiny_store, ram_budget="1GiB", threads=1, max_ctx=128, max_seqs=8) as llm:
        yield llm


@pytest.fixture(scope="session")
def qwen_llm(qwen_store):
    with fg.LLM(qwen_store, ram_budget="1GiB", threads=1, max_ctx=256, max_seqs=8) as llm:
        yield llm


def fg_infer_jobs(store, lines, work, *flags):
    """fg-infer --input/--output on lines (dicts); its result lines, in input order."""
    exe = os.environ.get("FG_INFER")
    if not exe:
        pytest.skip("FG_INFER (the build's fg-infer) not set")
    inp, out = Path(work) / "in.jsonl", Path(work) / "out.jsonl"
    inp.write_text("".join(json.dumps(x) + "\n" for x in lines))
    if out.exists():
        out.unlink()
    subprocess.run([exe, "-m", store, "--input", str(inp), "--output", str(out), "--quiet",
                    "--threads", "1", "--ram-budget", "1G", *flags], check=True)
    got = {}
    for ln in out.read_text().splitlines():
        o = json.loads(ln)
        got[o.get("id") or o.get("custom_id")] = o
    return [got[x.get("id") or x.get("custom_id")] for x in lines]
