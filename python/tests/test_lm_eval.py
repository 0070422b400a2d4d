"""The lm-eval model (fg.lm_eval.FgLM) on lm-eval-shaped requests, without lm-eval: its token
ids, rolling windows and scores against lm-eval 0.4.13's own `hf` model on the shipped model
(fixtures/lm_eval_ref.json, made by fixtures/make_lm_eval_ref.py), and its logic on Qwen's
tokenizer."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import fg
from fg.lm_eval import FgLM, get_rolling_token_windows, make_disjoint_window

REF = json.loads((Path(__file__).parent / "fixtures/lm_eval_ref.json").read_text())


def req(*args):
    return SimpleNamespace(args=args)


@pytest.fixture(scope="module")
def lm(qwen_llm):
    return FgLM(llm=qwen_llm, max_gen_toks=8)


@pytest.fixture(scope="module")
def austen_lm(austen_store):
    with fg.LLM(austen_store, ram_budget="1GiB", threads=1, max_ctx=REF["max_length"],
                max_seqs=8) as llm:
        yield FgLM(llm=llm)


def test_hf_token_ids_and_windows(austen_lm):
    """tok_encode and the rolling windows equal lm-eval's hf model's, id for id (the first text
    is longer than max_length: six windows)."""
    assert austen_lm.prefix_token_id == REF["prefix_token_id"]
    assert austen_lm.max_length == REF["max_length"]
    assert len(REF["rolling"][0]["windows"]) > 2
    for r in REF["rolling"]:
        assert austen_lm.tok_encode(r["text"]) == r["ids"], r["text"][:40]
        got = [[c, k] for c, k in austen_lm.rolling_windows(r["text"])]
        assert got == r["windows"], r["text"][:40]
    for p in REF["pairs"]:
        assert list(austen_lm._pair(p["context"], p["continuation"])) == [
            p["context_ids"], p["continuation_ids"]], p["context"][:40]


def test_hf_scores(austen_lm):
    """loglikelihood_rolling and loglikelihood equal lm-eval's hf model's (float32 torch):
    the same tokens scored, so only rounding differs."""
    got = austen_lm.loglikelihood_rolling([req(r["text"]) for r in REF["rolling"]])
    for g, r in zip(got, REF["rolling"]):
        assert g == pytest.approx(r["logprob"], rel=1e-5, abs=1e-3), r["text"][:40]
    got = austen_lm.loglikelihood([req(p["context"], p["continuation"]) for p in REF["pairs"]])
    for (lp, greedy), p in zip(got, REF["pairs"]):
        assert lp == pytest.approx(p["logprob"], rel=1e-5, abs=1e-3), p["context"][:40]
        assert greedy == p["is_greedy"]
    # ids handed in are used as they are
    p = REF["pairs"][0]
    assert austen_lm.loglikelihood([req(p["context_ids"], p["continuation_ids"])])[0] == \
        pytest.approx(got[0], abs=1e-4)  # (alone vs in a block: float rounding)


def test_rolling_windows_function():
    """The windows cover every token once, each window's input max_seq_len at most, the first
    predicted from the prefix token (lm-eval's rule, checked by hand on a small case)."""
    toks = list(range(10, 27))  # 17 tokens, max_seq_len 5
    w = [make_disjoint_window(x) for x in get_rolling_token_windows(toks, 1, 5, 1)]
    assert w[0] == ([1], toks[:5])
    assert [k for _, k in w] == [toks[0:5], toks[5:10], toks[10:15], toks[15:17]]
    assert w[1] == (toks[4:5], toks[5:10]) and w[3] == (toks[11:15], toks[15:17])
    for c, k in w:
        assert len(c) + len(k) - 1 <= 5
    assert list(get_rolling_token_windows([], 1, 5, 1)) == []


def test_loglikelihood(lm, qwen_llm):
    reqs = [req("Question: 2+2=", " 4"), req("Question: 2+2=", " 5"), req("", "Hello")]
    got = lm.loglikelihood(reqs)
    want = qwen_llm.score(["Question: 2+2=", "Question: 2+2="], [" 4", " 5"])
    close = lambda a, b: a[1] == b[1] and a[0] == pytest.approx(b[0], abs=1e-4)  # noqa: E731
    assert close(got[0], want[0]) and close(got[1], want[1])
    info = qwen_llm.info  # an empty context: the prefix token, BOS else EOS (lm-eval's)
    prefix = info["bos_id"] if info["bos_id"] >= 0 else info["eos_id"]
    hello = qwen_llm.tokenizer.encode("Hello", add_special_tokens=False)
    assert close(got[2], qwen_llm.score([[prefix]], [hello])[0])


def test_rolling(lm, qwen_llm):
    """A text longer than max_ctx: the sum of its windows scored as (context ids,
    continuation ids) pairs, every token once."""
    text = " ".join(["The quick brown fox jumps over the lazy dog."] * 40)
    ids = lm.tok_encode(text)
    assert len(ids) > qwen_llm.info["max_ctx"]
    w = lm.rolling_windows(text)
    assert len(w) >= 2 and sum(len(k) for _, k in w) == len(ids)
    want = sum(lp for lp, _ in qwen_llm.score([c for c, _ in w], [k for _, k in w]))
    got = lm.loglikelihood_rolling([req(text), req("Some text.")])
    assert got[0] == pytest.approx(want, abs=1e-6)
    assert got[1] < 0


def test_generate_until(lm, qwen_llm):
    free = qwen_llm.generate("Once", fg.SamplingParams(max_tokens=8, temperature=0))[0].text
    until = free[3:5] if len(free) >= 5 else "\n\n"
    outs = lm.generate_until([req("Once", {"until": [until], "do_sample": False}),
                              req("Once", {"until": "zzzz", "max_gen_toks": 3}),
                              req("Once", {"until": [until] + ["q%d" % i for i in range(9)]})])
    assert outs[0] == free.split(until)[0] if until in free else outs[0] == free
    assert outs[2] == outs[0]  # more than 8 stop strings: the rest cut here
    assert len(qwen_llm.tokenizer.encode(outs[1], add_special_tokens=False)) <= 3


def test_model_args(spare_stores):
    st = spare_stores[0]
    m = FgLM.create_from_arg_string(f"store={st},ram_budget=1GiB,threads=1,max_length=64",
                                    {"batch_size": 8, "device": None})
    assert m.llm.info["max_ctx"] == 64 and m.max_length == 64
    m.llm.close()
    with pytest.raises(ValueError, match="unknown model_args"):
        FgLM.create_from_arg_string(f"store={st},flux=3")
    with pytest.raises(ValueError, match="store"):
        FgLM.create_from_arg_string("ram_budget=1GiB")
