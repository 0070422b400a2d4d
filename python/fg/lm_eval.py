"""An lm-evaluation-harness model backed by fg: ``lm_eval --model fg --model_args store=DIR``.

Registered through lm-eval's plugin entry point (group ``lm_eval.models``, name ``fg``: see
python/pyproject.toml) where lm-eval discovers plugins, and by the @register_model decorator
when this module is imported. lm-eval releases without plugin discovery (0.4.13, the newest on
PyPI as this is written) never import it: ``python -m fg.lm_eval ARGS`` registers the model and
runs lm-eval's own command line with ARGS (``python -m fg.lm_eval --model fg --model_args
store=DIR --tasks ...``).
The three request kinds map onto one fg call each:

- loglikelihood(requests of (context, continuation)) -> LLM.score: summed log-prob and
  is-greedy, contexts shared across requests computed once; an empty context is scored from
  the prefix token (BOS, else EOS: lm-eval's prefix_token_id), as libfg's session does;
- loglikelihood_rolling(requests of (text,)) -> LLM.score_rolling;
- generate_until(requests of (context, gen_kwargs)) -> LLM.generate, the requests with equal
  gen_kwargs in one call (fg packs them into its blocks): ``until`` as stop strings,
  ``max_gen_toks``, ``do_sample`` / ``temperature`` / ``top_p`` / ``top_k`` / ``seed``.

model_args: store (required), and LLM's options: ram_budget, gpu_budget, policy, threads,
offload_dir, prefix_cache, backend, max_ctx, max_seqs; max_gen_toks (default 256). lm-eval's
own batch_size / device are accepted and ignored (fg chooses its block by its policy).

lm-eval is not needed to import this module: without it FgLM is a plain class with the same
methods (the package's tests use it so, with lm-eval's request objects faked by anything that
has ``.args``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .llm import LLM, SamplingParams

try:  # lm-eval present: a real LM subclass, registered under "fg"
    from lm_eval.api.model import LM as _Base
    from lm_eval.api.registry import register_model as _register
except ImportError:  # pragma: no cover - exercised by the package's tests
    _Base = object

    def _register(*names: str) -> Any:
        return lambda cls: cls

_LLM_ARGS = ("ram_budget", "gpu_budget", "policy", "threads", "offload_dir", "prefix_cache",
             "backend", "max_ctx", "max_seqs", "allow_lossy", "compress_weight")
_IGNORED = ("batch_size", "max_batch_size", "device", "trust_remote_code", "pretrained")


def _int(v: Any) -> Optional[int]:
    return None if v is None or v == "" else int(v)


def _cut(text: str, until: List[str]) -> str:
    """text before the first of the until strings (fg stops at 8 of them; more are cut here)."""
    cut = min((text.find(u) for u in until if u and u in text), default=-1)
    return text if cut < 0 else text[:cut]


@_register("fg")
class FgLM(_Base):  # type: ignore[misc, valid-type]
    """lm-eval's LM interface over an fg.LLM (see the module docstring)."""

    def __init__(self, store: Optional[str] = None, max_gen_toks: int = 256,
                 llm: Optional[LLM] = None, **kwargs: Any):
        if _Base is not object:
            super().__init__()
        for k in _IGNORED:
            kwargs.pop(k, None)
        unknown = set(kwargs) - set(_LLM_ARGS)
        if unknown:
            raise ValueError(f"fg: unknown model_args {', '.join(sorted(unknown))} (known: "
                             f"store, max_gen_toks, {', '.join(_LLM_ARGS)})")
        for k in ("threads", "max_ctx", "max_seqs"):
            if k in kwargs:
                kwargs[k] = _int(kwargs[k])
        for k in ("allow_lossy", "compress_weight"):
            if k in kwargs and isinstance(kwargs[k], str):
                kwargs[k] = kwargs[k].lower() in ("1", "true", "yes")
        if llm is None:
            if not store:
                raise ValueError("fg: model_args needs store=DIR (a store fg-convert made)")
            llm = LLM(store, **kwargs)
        self.llm = llm
        self.max_gen_toks = int(max_gen_toks)

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
        if not requests:
            return []
        return self.llm.score([r.args[0] for r in requests], [r.args[1] for r in requests])

    def loglikelihood_rolling(self, requests: List[Any], disable_tqdm: bool = False
                              ) -> List[float]:
        """The summed log-prob of each request's whole text (perplexity tasks)."""
        return [self.llm.score_rolling(r.args[0])[0] for r in requests]

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
