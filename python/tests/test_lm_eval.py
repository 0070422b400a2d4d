"""The lm-eval model's logic (fg.lm_eval.FgLM) on lm-eval-shaped requests, without lm-eval."""
from types import SimpleNamespace

import pytest

import fg
from fg.lm_eval import FgLM


def req(*args):
    return SimpleNamespace(args=args)


@pytest.fixture(scope="module")
def lm(qwen_llm):
    return FgLM(llm=qwen_llm, max_gen_toks=8)


def test_loglikelihood(lm, qwen_llm):
    reqs = [req("Question: 2+2=", " 4"), req("Question: 2+2=", " 5"), req("", "Hello")]
    got = lm.loglikelihood(reqs)
    want = qwen_llm.score(["Question: 2+2=", "Question: 2+2="], [" 4", " 5"])
    close = lambda a, b: a[1] == b[1] and a[0] == pytest.approx(b[0], abs=1e-4)  # noqa: E731
    assert close(got[0], want[0]) and close(got[1], want[1])
    info = qwen_llm.info  # an empty context: the prefix token, BOS else EOS (lm-eval's)
    prefix = info["bos_id"] if info["bos_id"] >= 0 else info["eos_id"]
    assert close(got[2], qwen_llm.score([[prefix]], ["Hello"])[0])


def test_rolling(lm, qwen_llm):
    assert lm.loglikelihood_rolling([req("Some text.")]) == [qwen_llm.score_rolling(
        "Some text.")[0]]


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
    m = FgLM.create_from_arg_string(f"store={st},ram_budget=1GiB,threads=1,max_ctx=64",
                                    {"batch_size": 8, "device": None})
    assert m.llm.info["max_ctx"] == 64
    m.llm.close()
    with pytest.raises(ValueError, match="unknown model_args"):
        FgLM.create_from_arg_string(f"store={st},flux=3")
    with pytest.raises(ValueError, match="store"):
        FgLM.create_from_arg_string("ram_budget=1GiB")
