"""The package's surface: import, sizes, convert, inspect, the tokenizer, errors."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import fg
from fg import _lib


def test_import_needs_no_compiler(tmp_path):
    """A fresh interpreter imports fg with no compiler on PATH (ctypes only)."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(fg.__file__)))
    env = dict(os.environ, PATH=str(tmp_path), CC="/nonexistent", PYTHONPATH=pkg)
    r = subprocess.run([sys.executable, "-c", "import fg; print(fg.libfg_version)"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith("0.")


@pytest.mark.parametrize("v,want", [("4GiB", 4 << 30), ("512M", 512 << 20), ("1.5g", 3 << 29),
                                    ("2TB", 2 << 40), (1 << 20, 1 << 20), (None, 0)])
def test_sizes(v, want):
    assert _lib.parse_size(v, "ram_budget") == want


@pytest.mark.parametrize("v", ["4 parsecs", "", "1k", "0.5M", 12, True, 3.5])
def test_bad_sizes(v):
    with pytest.raises((ValueError, TypeError), match="ram_budget"):
        _lib.parse_size(v, "ram_budget")


def test_inspect(tiny_store):
    d = fg.inspect(tiny_store)
    assert d["model"]["family"] if "family" in d["model"] else d["model"]
    names = [t["name"] for t in d["tensors"]]
    assert any("embed" in n for n in names), names[:5]
    assert "metadata" in d and d["files"]
    v = fg.inspect(tiny_store, verify=True, chunks=False)
    assert v["verify"]["ok"] is True


def test_inspect_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        fg.inspect(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises((FileNotFoundError, fg.FgError), match="empty"):
        fg.inspect(str(tmp_path / "empty"))


def test_convert(qwen_ckpt, tmp_path):
    seen = []
    rep = fg.convert(str(qwen_ckpt), str(tmp_path / "q.store"), progress=lambda d, t:
                     seen.append((d, t)))
    assert rep["tensors"] > 0 and rep["stored_bytes"] > 0
    assert seen and seen[-1][0] == seen[-1][1] > 0, seen[-3:]
    q4 = fg.convert(str(tmp_path / "q.store"), str(tmp_path / "q4.store"), compress_weight=True,
                    group_size=32, group_axis=1, progress=False)
    assert q4["stored_bytes"] < rep["stored_bytes"]
    codecs = {t["codec"] for t in fg.inspect(str(tmp_path / "q4.store"))["tensors"]}
    assert any(c.startswith("q4") or c.startswith("Q4") for c in codecs), codecs


def test_convert_errors(tmp_path, qwen_ckpt):
    with pytest.raises(FileNotFoundError):
        fg.convert(str(tmp_path / "missing"), str(tmp_path / "o"), progress=False)
    with pytest.raises(ValueError, match="group_size"):
        fg.convert(str(qwen_ckpt), str(tmp_path / "o"), group_size=32, progress=False)
    with pytest.raises(ValueError, match="weight_bits"):
        fg.convert(str(qwen_ckpt), str(tmp_path / "o"), compress_weight=True, weight_bits=3)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "no-such-family"}))
    (bad / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    with pytest.raises((ValueError, fg.FgError), match="no-such-family|model_type|safetensors"):
        fg.convert(str(bad), str(tmp_path / "o2"), progress=False)
    assert not (tmp_path / "o2").exists()


def test_convert_ctrl_c(qwen_ckpt, tmp_path):
    """Ctrl-C stops a conversion at its next chunk: KeyboardInterrupt, and no store left (an
    existing empty directory is left empty)."""
    seen = []

    def progress(done, total):  # runs on the conversion's thread
        seen.append((done, total))
        if len(seen) == 1:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)  # the main thread's handler (every 50 ms) sets the stop flag

    for dst in (tmp_path / "new.store", tmp_path / "empty"):
        seen.clear()
        if dst.name == "empty":
            dst.mkdir()
        with pytest.raises(KeyboardInterrupt):
            fg.convert(str(qwen_ckpt), str(dst), progress=progress)
        assert len(seen) == 1 and seen[0][0] < seen[0][1], seen  # stopped mid-way
        if dst.name == "empty":
            assert dst.is_dir() and not list(dst.iterdir())
        else:
            assert not dst.exists()
    rep = fg.convert(str(qwen_ckpt), str(tmp_path / "new.store"), progress=False)
    assert rep["tensors"] > 0


def test_second_handle_refused(spare_stores):
    """One handle per store per process (LMDB's rule): a clear error naming the way out; the
    store opens again once the first LLM is closed."""
    st = spare_stores[1]
    with fg.LLM(st, ram_budget="1GiB", threads=1, max_ctx=64) as first:
        with pytest.raises(fg.FgError, match="already open by another fg.LLM in this process"):
            fg.LLM(st, ram_budget="1GiB", threads=1, max_ctx=64)
        assert first.generate("x", fg.SamplingParams(max_tokens=1))  # the first one is fine
    with fg.LLM(st, ram_budget="1GiB", threads=1, max_ctx=64) as again:
        assert again.generate("x", fg.SamplingParams(max_tokens=1))


def test_open_errors(tmp_path, tiny_store):
    with pytest.raises(FileNotFoundError):
        fg.LLM(str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="policy"):
        fg.LLM(tiny_store, policy="fastest")
    with pytest.raises(ValueError, match="ram_budget"):
        fg.LLM(tiny_store, ram_budget="lots")
    with pytest.raises(ValueError, match="backend"):
        fg.LLM(tiny_store, backend="tpu")
    with pytest.raises(ValueError, match="compute"):
        fg.LLM(tiny_store, compute="fp8")
    with pytest.raises(ValueError, match="bf16"):
        fg.LLM(tiny_store, backend="cuda", compute="bf16")


def test_compute_bf16(tiny_store, tmp_path):
    """compute="bf16" opens and generates (on a copy of the store: the session's tiny_llm may
    hold it, one handle per store per process); on this fixture (F16 weights, a tiny model far
    from ties) its greedy tokens equal the default path's, prompts of several rows included
    (the bf16 GEMM from 2 rows on a CPU with AVX512-BF16)."""
    prompts = ["Hello", "It is a truth universally acknowledged", "Anne Elliot"]
    sp = fg.SamplingParams(max_tokens=6, temperature=0)
    copy = tmp_path / "tiny-copy.store"
    shutil.copytree(tiny_store, copy)
    got = {}
    for compute in ("int8", "bf16"):
        with fg.LLM(str(copy), ram_budget="1GiB", threads=1, max_ctx=128, max_seqs=8,
                    compute=compute) as llm:
            got[compute] = [g.token_ids for g in llm.generate(prompts, sp)]
    assert all(len(t) == 6 for t in got["bf16"])
    assert got["bf16"] == got["int8"]


def test_score_room(spare_stores):
    """score_room keeps room in a RAM budget for score()'s shared contexts: four continuations
    of one long context share its rows with it, none without it (the pager's pool takes the
    whole budget), with the same log-probs either way."""
    ctx = "It is a truth universally acknowledged, that a single man in possession " * 4
    conts = [" of a good fortune", " must be in want", " of a wife", " however little"]
    got = {}
    for room in (False, True):
        with fg.LLM(spare_stores[0], ram_budget="256MiB", threads=1, max_ctx=128, max_seqs=8,
                    score_room=room) as llm:
            got[room] = (llm.score([ctx] * 4, conts), llm.stats())
    assert got[False][1]["rows_shared"] == 0 and got[True][1]["rows_shared"] > 0, got
    assert got[True][1]["prefill_rows"] < got[False][1]["prefill_rows"]
    for (a, ga), (b, gb) in zip(got[False][0], got[True][0]):
        assert a == pytest.approx(b, abs=1e-4) and ga == gb


def test_budget_too_small(tiny_store):
    with pytest.raises(MemoryError, match="budget"):
        fg.LLM(tiny_store, ram_budget="1M", max_ctx=128)


def test_tokenizer(qwen_llm):
    tok = qwen_llm.tokenizer
    ids = tok.encode("Hello, world! ünïcode")
    assert ids and all(isinstance(i, int) for i in ids)
    assert tok.decode(ids) == "Hello, world! ünïcode"
    assert tok.eos_token_id == 151645 or tok.eos_token_id == 151643
    assert qwen_llm.info["has_chat_template"] is True
    assert qwen_llm.info["max_ctx"] == 256


def test_closed(tiny_store):
    llm = fg.LLM(tiny_store, ram_budget="1GiB", threads=1, max_ctx=64)
    llm.close()
    llm.close()
    with pytest.raises(fg.FgError, match="closed"):
        llm.generate("x")
