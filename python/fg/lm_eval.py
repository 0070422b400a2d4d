"""An lm-evaluation-harness model backed by fg:
``python -m fg.lm_eval --model fg --model_args store=DIR --tasks ...``.

Registration: the @register_model decorator registers the model as ``fg`` whenever this module
is imported. No lm-eval release on PyPI discovers plugins (checked through 0.4.13, the newest as
this is written: its model registry can hold lazy EntryPoint placeholders, but nothing fills it
from installed packages, and its command line loads no model code of the user's; upstream, issue
#3282 proposes namespace-package plugins and PR #3672's ``--include_package`` an import flag,
both open), so the package declares no entry point and ``lm_eval --model fg`` does not find
the model. ``python -m fg.lm_eval ARGS`` imports this module, then runs lm-eval's own command
line with ARGS (``python -m fg.lm_eval --model fg --model_args store=DIR --tasks ...``); from
Python, ``import fg.lm_eval`` before ``lm_eval.simple_evaluate(model="fg", ...)``. Tested with
lm-eval 0.4.13 (bench/lmeval.sh), whose ``hf`` model's tokenization this module mirrors.

The requests are turned into token ids exactly as lm-eval 0.4.13's ``hf`` model does
(lm_eval.api.model.TemplateLM and lm_eval.models.huggingface.HFLM), then scored by id, so the
two give the same numbers on the same checkpoint:

- tok_encode(text): the tokenizer with its special tokens (tokenizer.encode(text): OPT's
  leading ``</s>``, Llama's ``<s>``), none when the text already starts with the prefix
  token's text;
- prefix_token_id: BOS, else EOS (the ``prefix_token_id`` model arg overrides it);
- max_length: the session's max_ctx (model arg ``max_ctx`` or ``max_length``; default the
  model's positions, as HFLM reads them from config.json);
- loglikelihood(requests of (context, continuation)): _encode_pair's rule (the context's
  trailing spaces move to the continuation; the joined text encoded, the continuation being the
  tokens past the context's own); an empty context is the prefix token, the continuation
  encoded without specials (its first token is the context when it is the prefix token).
  Contexts or continuations given as lists of token ids are used as they are;
- loglikelihood_rolling(requests of (text,)): lm-eval's rolling windows
  (get_rolling_token_windows(tok_encode(text), prefix_token_id, max_length, context_len=1),
  each made disjoint), every window scored as a (context ids, continuation ids) pair and
  summed;
- each (context ids, continuation ids) pair -> LLM.score: the window (context + continuation
  less its last token, cut from the left to max_length) and the summed log-prob and is-greedy
  of the continuation; all pairs of a call go to libfg at once (equal windows computed once);
- generate_until(requests of (context, gen_kwargs)) -> LLM.generate, the requests with equal
  gen_kwargs in one call (fg packs them into its blocks): ``until`` as stop strings,
  ``max_gen_toks``, ``do_sample`` / ``temperature`` / ``top_p`` / ``top_k`` / ``seed``.

model_args: store (required), and LLM's options: ram_budget, gpu_budget, policy, threads,
offload_dir, prefix_cache, backend, max_ctx (alias max_length), max_seqs; max_gen_toks (default
256), prefix_token_id. lm-eval's own batch_size / device are accepted and ignored (fg chooses
its block by its policy).

lm-eval is not needed to import this module: without it FgLM is a plain class with the same
methods (the package's tests use it so, with lm-eval's request objects faked by anything that
has ``.args``).
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

from .llm import LLM, SamplingParams

try:  # lm-eval present: a real LM subclass, registered under "fg"
    from lm_eval.api.model import LM as _Base
    from lm_eval.api.registry import register_model as _register
except ImportError:  # pragma: no cover - exercised by the package's tests
    _Base = object

    def _register(*names: str) -> Any:
        return lambda cls: cls

_LLM_ARGS = ("ram_budget", "gpu_budget", "policy", "threads", "offload_dir", "prefix_cache",
             "backend", "max_ctx", "max_seqs", "allow_lossy", "compress_weight", "score_room")
_IGNORED = ("batch_size", "max_batch_size", "device", "trust_remote_code", "pretrained")
Pair = Tuple[Any, List[int], List[int]]  # (key, context ids, continuation ids): lm-eval's


def _int(v: Any) -> Optional[int]:
    return None if v is None or v == "" else int(v)


def get_rolling_token_windows(token_list: List[int], prefix_token: int, max_seq_len: int,
                              context_len: int) -> Iterator[Tuple[List[int], List[int]]]:
    """lm-eval 0.4.13's lm_eval.utils.get_rolling_token_windows: (input tokens, predicted
    tokens) windows covering token_list, the first predicted from prefix_token; score the last
    len(predicted) positions of each input (python/tests/test_lm_eval.py checks these against
    lm-eval's own, tests/fixtures/lm_eval)."""
    if not 1 <= context_len <= max_seq_len:
        raise ValueError(f"context_len {context_len} not in [1, {max_seq_len}]")
    if not token_list:
        return
    pred_len = max_seq_len - context_len + 1
    first = min(max_seq_len, len(token_list))
    yield [prefix_token] + token_list[:first - 1], token_list[:first]
    predicted = first
    while predicted < len(token_list):
        n = min(len(token_list) - predicted, pred_len)
        end = predicted + n
        yield token_list[end - max_seq_len - 1:end - 1], token_list[end - n:end]
        predicted += n


def make_disjoint_window(pair: Tuple[List[int], List[int]]) -> Tuple[List[int], List[int]]:
    """lm-eval's make_disjoint_window: the window's input less the part the prediction
    overlaps, so (context, continuation) are disjoint and context + continuation[:-1] is the
    input."""
    a, b = pair
    return a[:len(a) - (len(b) - 1)], b


def _ids(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and all(isinstance(t, int) for t in x)


def _cut(text: str, until: List[str]) -> str:
    """text before the first of the until strings (fg stops at 8 of them; more are cut here)."""
    cut = min((text.find(u) for u in until if u and u in text), default=-1)
    return text if cut < 0 else text[:cut]


@_register("fg")
class FgLM(_Base):  # type: ignore[misc, valid-type]
    """lm-eval's LM interface over an fg.LLM (see the module docstring)."""

    def __init__(self, store: Optional[str] = None, max_gen_toks: int = 256,
                 llm: Optional[LLM] = None, prefix_token_id: Any = None, **kwargs: Any):
        if _Base is not object:
            super().__init__()
        for k in _IGNORED:
            kwargs.pop(k, None)
        if "max_length" in kwargs:  # HFLM's name for it
            ml = kwargs.pop("max_length")
            if kwargs.get("max_ctx") not in (None, "", ml):
                raise ValueError("fg: model_args max_length and max_ctx differ")
            kwargs["max_ctx"] = ml
        unknown = set(kwargs) - set(_LLM_ARGS)
        if unknown:
            raise ValueError(f"fg: unknown model_args {', '.join(sorted(unknown))} (known: "
                             f"store, max_gen_toks, prefix_token_id, max_length, "
                             f"{', '.join(_LLM_ARGS)})")
        for k in ("threads", "max_ctx", "max_seqs"):
            if k in kwargs:
                kwargs[k] = _int(kwargs[k])
        for k in ("allow_lossy", "compress_weight", "score_room"):
            if k in kwargs and isinstance(kwargs[k], str):
                kwargs[k] = kwargs[k].lower() in ("1", "true", "yes")
        kwargs.setdefault("score_room", True)  # an evaluation mostly scores
        if llm is None:
            if not store:
                raise ValueError("fg: model_args needs store=DIR (a store fg-convert made)")
            llm = LLM(store, **kwargs)
        self.llm = llm
        self.max_gen_toks = int(max_gen_toks)
        info = llm.info
        self._prefix = (_int(prefix_token_id) if prefix_token_id not in (None, "") else
                        info["bos_id"] if info["bos_id"] >= 0 else info["eos_id"])
        # has_bos_prefix: a text starting with the prefix token's text gets no specials
        self._prefix_text = llm.tokenizer.decode([self._prefix], skip_special_tokens=False)

    # ---- lm-eval's TemplateLM / HFLM attributes (0.4.13), fg's values

    @property
    def eot_token_id(self) -> int:
        return self.llm.info["eos_id"]

    @property
    def prefix_token_id(self) -> int:
        return self._prefix

    @property
    def max_length(self) -> int:
        return self.llm.info["max_ctx"]

    def tok_encode(self, string: str, add_special_tokens: Optional[bool] = None,
                   **kwargs: Any) -> List[int]:
        """HFLM.tok_encode: the tokenizer's ids with its special tokens, unless the text starts
        with the prefix token's text (or add_special_tokens says)."""
        if add_special_tokens is None:
            add_special_tokens = not (self._prefix_text and
                                      string.startswith(self._prefix_text))
        return self.llm.tokenizer.encode(string, add_special_tokens=add_special_tokens)

    def _encode_pair(self, context: str, continuation: str) -> Tuple[List[int], List[int]]:
        """TemplateLM._encode_pair (causal): the context's trailing spaces move to the
        continuation; the continuation is the joined text's tokens past the context's."""
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces > 0:
            continuation = context[-n_spaces:] + continuation
            context = context[:-n_spaces]
        whole = self.tok_encode(context + continuation)
        ctx = self.tok_encode(context)
        return ctx, whole[len(ctx):]

    def _pair(self, context: Any, continuation: Any) -> Tuple[List[int], List[int]]:
        """A request's (context ids, continuation ids) as TemplateLM.loglikelihood makes them;
        ids given are kept."""
        if _ids(context) and _ids(continuation):
            return list(context), list(continuation)
        if _ids(context):
            return list(context), self.tok_encode(continuation, add_special_tokens=False)
        if context == "":
            cont = (list(continuation) if _ids(continuation) else
                    self.tok_encode(continuation, add_special_tokens=False))
            if cont and cont[0] == self._prefix:
                return cont[:1], cont[1:]
            return [self._prefix], cont
        if _ids(continuation):
            return self.tok_encode(context), list(continuation)
        return self._encode_pair(context, continuation)

    def _loglikelihood_tokens(self, requests: List[Pair], disable_tqdm: bool = False,
                              **kwargs: Any) -> List[Tuple[float, bool]]:
        """(summed log-prob, is greedy) of each (key, context ids, continuation ids), all in
        one LLM.score call."""
        if not requests:
            return []
        return self.llm.score([list(r[1]) for r in requests], [list(r[2]) for r in requests])

    def rolling_windows(self, string: str) -> List[Tuple[List[int], List[int]]]:
        """The (context ids, continuation ids) pairs HFLM.loglikelihood_rolling scores for
        string: disjoint rolling windows of max_length over tok_encode(string)."""
        return [make_disjoint_window(w) for w in get_rolling_token_windows(
            self.tok_encode(string), self._prefix, self.max_length, 1)]

    @classmethod
    def create_from_arg_string(cls, arg_string: str,
                               additional_config: Optional[Dict[str, Any]] = None) -> "FgLM":
        """lm-eval's constructor from "store=DIR,ram_budget=8GiB,..."."""
        args: Dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in arg_string.split(","))):
            k, sep, v = part.partition("=")
            if not sep:
                raise ValueError(f"fg: model_args: '{part}' is not key=value")
            args[k.strip()] = v.strip()
        args.update({k: v for k, v in (additional_config or {}).items() if v is not None})
        return cls(**args)

    # ---- lm-eval's three request kinds

    def loglikelihood(self, requests: List[Any], disable_tqdm: bool = False
                      ) -> List[Tuple[float, bool]]:
        """(summed log-prob, is greedy) of each request's continuation given its context."""
        pairs = [(tuple(r.args[:2]),) + self._pair(r.args[0], r.args[1]) for r in requests]
        return self._loglikelihood_tokens(pairs)  # type: ignore[arg-type]

    def loglikelihood_rolling(self, requests: List[Any], disable_tqdm: bool = False
                              ) -> List[float]:
        """The summed log-prob of each request's whole text (perplexity tasks): its rolling
        windows' continuations, all requests' windows scored in one call."""
        windows: List[Pair] = []
        counts = []
        for r in requests:
            w = self.rolling_windows(r.args[0])
            windows.extend((None, c, k) for c, k in w)
            counts.append(len(w))
        res = self._loglikelihood_tokens(windows)
        out, at = [], 0
        hook = getattr(self, "cache_hook", None)
        for r, n in zip(requests, counts):
            total = sum(lp for lp, _ in res[at:at + n])
            at += n
            out.append(total)
            if hook is not None:
                hook.add_partial("loglikelihood_rolling", (r.args[0],), total)
        return out

    def generate_until(self, requests: List[Any], disable_tqdm: bool = False) -> List[str]:
        """Each request's continuation, cut before its first ``until`` string."""
        groups: Dict[str, List[int]] = {}
        params: Dict[str, SamplingParams] = {}
        for i, r in enumerate(requests):
            sp = self._params(r.args[1] if len(r.args) > 1 else {})
            key = repr((sp, getattr(sp, "_until")))
            groups.setdefault(key, []).append(i)
            params[key] = sp
        out: List[str] = [""] * len(requests)
        for key, idx in groups.items():
            res = self.llm.generate([requests[i].args[0] for i in idx], params[key])
            until = getattr(params[key], "_until", [])
            for i, o in zip(idx, res):
                out[i] = _cut(o.text, until)
        return out

    # ---- helpers lm-eval may call

    @property
    def tokenizer_name(self) -> str:
        return self.llm.info["model_name"]

    def apply_chat_template(self, chat_history: List[Dict[str, str]],
                            add_generation_prompt: bool = True) -> str:
        """The prompt of a conversation through the store's chat template."""
        return self.llm.apply_chat_template(chat_history)

    def _params(self, kw: Dict[str, Any]) -> SamplingParams:
        kw = dict(kw or {})
        until = kw.pop("until", None)
        stops = [until] if isinstance(until, str) else list(until or [])
        max_toks = int(kw.pop("max_gen_toks", self.max_gen_toks))
        temp = float(kw.pop("temperature", 0.0) or 0.0)
        do_sample = bool(kw.pop("do_sample", temp > 0))  # HF: greedy unless sampling asked
        sp = SamplingParams(max_tokens=max_toks, temperature=temp if do_sample else 0.0,
                            stop=stops[:8] or None)
        sp._until = stops  # type: ignore[attr-defined] - all of them, cut below past 8
        if "top_p" in kw:
            sp.top_p = float(kw.pop("top_p"))
        if "top_k" in kw:
            sp.top_k = int(kw.pop("top_k"))
        if "seed" in kw:
            sp.seed = int(kw.pop("seed"))
        return sp


def main() -> None:
    """lm-eval's command line with the fg model registered (``python -m fg.lm_eval ...``)."""
    if _Base is object:
        raise SystemExit("fg.lm_eval: lm-eval is not installed (pip install lm-eval)")
    from lm_eval.__main__ import cli_evaluate
    cli_evaluate()


if __name__ == "__main__":
    main()
