"""fg.LLM: a store opened once, then generate / chat / stream / score / run_batch from Python.

One engine behind every front door: each method is one call into libfg's session
(runner/session.h) through libfgpy; this module only converts arguments and results.
"""
from __future__ import annotations

import contextlib
import ctypes as C
import json
import math
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _lib
from ._lib import FgError, lib

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Tokenizer"]

_FINISH = {0: None, 1: "length", 2: "stop", 3: "stop"}
_BACKENDS = {"cpu": 0, "sim": 1, "cuda": 2}
_COMPUTE = {"f32": 0, "int8": 1, "f16": 2, "bf16": 3}  # fg_compute (backend.h)


@dataclass
class SamplingParams:
    """How to sample, per request (vLLM's names and defaults).

    temperature 0 is greedy decoding (the most likely token every step); ``seed`` makes a
    sampled result reproducible whatever else runs in the same block. ``stop`` strings end a
    choice before them. ``logprobs`` k >= 0 returns each generated token's log-prob and its k
    most likely alternatives. ``n`` independent choices per prompt.
    """
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Optional[int] = None
    stop: Union[None, str, Sequence[str]] = None
    n: int = 1
    logprobs: Optional[int] = None
    min_tokens: int = 0
    ignore_eos: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0

    def _check(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, not {self.max_tokens!r}")
        if self.temperature < 0 or not math.isfinite(self.temperature):
            raise ValueError(f"temperature must be >= 0, not {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], not {self.top_p!r}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: off), not {self.top_k!r}")
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be a positive integer, not {self.n!r}")
        if self.logprobs is not None and self.logprobs < 0:
            raise ValueError(f"logprobs must be >= 0 or None, not {self.logprobs!r}")
        if self.seed is not None and not 0 <= self.seed < 1 << 64:
            raise ValueError(f"seed must be in [0, 2**64), not {self.seed!r}")


@dataclass
class CompletionOutput:
    """One choice: its text (special tokens skipped, cut before a stop string), the generated
    token ids, why it ended ("stop": EOS or a stop string; "length": max_tokens) and, when
    asked, per generated token a dict {token id: log-prob} of the chosen token (first) and
    the top alternatives (natural log, the model's distribution before sampling's warpers)."""
    index: int
    text: str
    token_ids: List[int]
    finish_reason: Optional[str]
    logprobs: Optional[List[Dict[int, float]]] = None

    @property
    def cumulative_logprob(self) -> Optional[float]:
        """Sum of the chosen tokens' log-probs (with logprobs asked), else None."""
        if self.logprobs is None:
            return None
        return sum(next(iter(d.values())) for d in self.logprobs)


@dataclass
class RequestOutput:
    """The result of one prompt: its token ids as the model saw them and its choices
    (``outputs``; one unless SamplingParams.n > 1). ``text``, ``token_ids``,
    ``finish_reason`` and ``logprobs`` are the first choice's."""
    prompt: Optional[str]
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_ids(self) -> List[int]:
        return self.outputs[0].token_ids

    @property
    def finish_reason(self) -> Optional[str]:
        return self.outputs[0].finish_reason

    @property
    def logprobs(self) -> Optional[List[Dict[int, float]]]:
        return self.outputs[0].logprobs


class Tokenizer:
    """The store's tokenizer (as transformers' tokenizer for that checkpoint)."""

    def __init__(self, llm: "LLM"):
        self._llm = llm
        self._around: Optional[Tuple[List[int], List[int]]] = None

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        """Token ids of text as transformers' tokenizer.encode(text, add_special_tokens=...):
        special tokens written in the text are matched either way; add_special_tokens adds
        what the model's post-processor puts around a text (BOS for most; none for Qwen)."""
        ids = self._encode(text)
        if add_special_tokens:
            return ids
        pre, suf = self._added()
        if ids[:len(pre)] == pre and len(ids) >= len(pre) + len(suf) and \
                ids[len(ids) - len(suf):] == suf:
            ids = ids[len(pre):len(ids) - len(suf)]
        return ids

    def _added(self) -> Tuple[List[int], List[int]]:
        """The tokens the post-processor puts before and after a text: those of the empty
        text, split where the text "a" goes between them."""
        if self._around is None:
            e, a = self._encode(""), self._encode("a")
            self._around = (e, [])
            for k in range(len(e), -1, -1):
                pre, suf = e[:k], e[k:]
                if len(a) > len(e) and a[:k] == pre and a[len(a) - len(suf):] == suf:
                    self._around = (pre, suf)
                    break
        return self._around

    def _encode(self, text: str) -> List[int]:
        """libfg's prompt encoding (FG_TOK_SPECIAL | FG_TOK_ADD_BOS): tokenizer(text)."""
        ids = C.POINTER(C.c_int32)()
        n = C.c_uint32()
        err = _lib.Err()
        with self._llm._busy() as h:
            _lib.check(lib.fgpy_tokenize(h, text.encode(), 1, C.byref(ids), C.byref(n),
                                         C.byref(err)), err)
        try:
            return ids[:n.value]
        finally:
            lib.fgpy_free(C.cast(ids, C.c_void_p))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of ids, as decode(ids, skip_special_tokens=...)."""
        arr = (C.c_int32 * max(len(ids), 1))(*ids)
        out = C.c_void_p()
        err = _lib.Err()
        with self._llm._busy() as h:
            _lib.check(lib.fgpy_detokenize(h, arr, len(ids), int(skip_special_tokens),
                                           C.byref(out), C.byref(err)), err)
        return _lib.take_string(out.value)

    @property
    def bos_token_id(self) -> Optional[int]:
        v = self._llm._info().bos_id
        return None if v < 0 else v

    @property
    def eos_token_id(self) -> Optional[int]:
        v = self._llm._info().eos_id
        return None if v < 0 else v

    @property
    def vocab_size(self) -> int:
        return self._llm._info().vocab_size


def _check_messages(msgs: Any) -> None:
    """A conversation as the chat endpoint takes it: a non-empty list of dicts with a str
    "role" and a "content" (the template reads any other keys)."""
    if not isinstance(msgs, list) or not msgs:
        raise ValueError("messages: a conversation is a non-empty list of message dicts")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise ValueError(f"messages[{i}]: a dict with role and content, not {m!r}")
        if not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}]: no \"role\"")
        if "content" not in m:
            raise ValueError(f"messages[{i}]: no \"content\"")


def _to_bytes(s: Optional[str]) -> Optional[bytes]:
    return None if s is None else s.encode()


class LLM:
    """A store opened for generation: its model, tokenizer, chat template and engine, planned
    once for ``max_ctx`` tokens a sequence and ``max_seqs`` sequences a block.

    Args:
        store: the store directory (fg.convert or fg-convert made it).
        ram_budget: bytes the engine may allocate (int, or "4GiB", "512M"); None: at most the
            RAM available now (a plan needing more is refused at open).
        gpu_budget: device bytes (implies backend="cuda" unless backend is given).
        policy: "auto" (the policy search chooses block, placement and cache compression) or
            "fixed" (FlexGen's default placement).
        threads: compute threads (None: the CPUs online).
        offload_dir: where the KV cache's disk file goes when it is homed on disk.
        prefix_cache: a directory keeping prompt prefixes' KV rows across calls.
        backend: "cpu", "cuda" or "sim" (the simulated device); None: "cpu", or "cuda" with a
            gpu_budget.
        max_ctx: tokens a sequence may hold, prompt + generation (None: the model's).
        max_seqs: sequences a block (None: the policy's choice, at most 32).
        allow_lossy: let the policy search choose the 4-bit KV cache.
        compress_weight: quantize the weights to 4 bits at load.
        compute: fg-infer's --compute: "int8" (integer dot products on 4/8-bit weights grouped
            along the input axis), "f32", "f16" (16-bit GEMM inputs on cuda) or "bf16" (as
            int8, and F16/BF16 weights multiplied with x and weights rounded to bfloat16 on a
            CPU with AVX512-BF16; f32 on one without; not with backend "cuda").
        quiet: no notices on stderr.
        score_room: under ram_budget, keep room out of the memory plan for score()'s shared
            contexts (a context several continuations share is computed once and its KV rows
            copied, outside the plan): at most a quarter of the budget. Without it the pager's
            pool takes every byte the plan does not and a budgeted LLM computes each context
            whole. Worth it when the LLM mostly scores (lm-eval's adapter sets it).

    Use it as a context manager, or call close(). One call at a time per LLM (calls from
    several threads are serialized); two LLM objects on two stores are independent. A store
    is opened by one handle per process (LMDB allows one environment per process): a second
    LLM on a store this process has open raises fg.FgError saying so. Long calls release the
    GIL; Ctrl-C stops the engine at its next step and raises KeyboardInterrupt, the LLM stays
    usable.
    """

    def __init__(self, store: str, ram_budget: Union[int, str, None] = "4GiB",
                 gpu_budget: Union[int, str, None] = None, policy: str = "auto",
                 threads: Optional[int] = None, offload_dir: Optional[str] = None,
                 prefix_cache: Optional[str] = None, *, backend: Optional[str] = None,
                 max_ctx: Optional[int] = None, max_seqs: Optional[int] = None,
                 allow_lossy: bool = False, compress_weight: bool = False,
                 quiet: bool = True, compute: str = "int8", score_room: bool = False):
        self._h: Optional[int] = None
        self._lock = threading.Lock()
        self._streaming: set = set()  # threads iterating an open stream of this LLM
        if policy not in ("auto", "fixed"):
            raise ValueError(f"policy must be 'auto' or 'fixed', not {policy!r}")
        if backend is None:
            backend = "cuda" if gpu_budget is not None else "cpu"
        if backend not in _BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(_BACKENDS)}, not {backend!r}")
        if compute not in _COMPUTE:
            raise ValueError(f"compute must be one of {', '.join(_COMPUTE)}, not {compute!r}")
        if compute == "bf16" and backend == "cuda":
            raise ValueError("compute 'bf16' is the CPU's 16-bit path; with backend 'cuda' use "
                             "'f16'")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive integer, not {threads!r}")
        self._keep = [_to_bytes(str(store)), _to_bytes(offload_dir), _to_bytes(prefix_cache)]
        o = _lib.Opts()
        o.store, o.offload_dir, o.prefix_cache = self._keep
        o.ram_budget = _lib.parse_size(ram_budget, "ram_budget")
        o.gpu_budget = _lib.parse_size(gpu_budget, "gpu_budget")
        o.policy_auto = -1 if policy == "auto" else 0
        o.threads = threads or 0
        o.backend = _BACKENDS[backend]
        o.max_ctx = max_ctx or 0
        o.max_seqs = max_seqs or 0
        o.allow_lossy = int(allow_lossy)
        o.compress_weight = int(compress_weight)
        o.quiet = int(quiet)
        o.compute = 1 + _COMPUTE[compute]
        o.score_room = int(bool(score_room))
        self._opts = o
        self._reopen()
        self.tokenizer = Tokenizer(self)

    def _reopen(self) -> None:
        h = C.c_void_p()
        err = _lib.Err()
        rc = lib.fgpy_open(C.byref(self._opts), C.byref(h), C.byref(err))
        if rc == _lib.FG_ERR_STORE_BUSY and b"in this process" in err.msg:
            store = self._opts.store.decode("utf-8", "replace")
            raise FgError(f"{store}: already open by another fg.LLM in this process (one "
                          "handle per store per process: LMDB, the store's catalog, allows one "
                          "environment per process); close that LLM first, or open a copy of "
                          "the store or use another process", rc)
        _lib.check(rc, err)
        self._h = h.value

    # ---- lifecycle

    def close(self) -> None:
        """Close the engine and free everything (idempotent)."""
        with self._lock:
            if self._h:
                lib.fgpy_close(self._h)
                self._h = None

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    @contextlib.contextmanager
    def _busy(self) -> Iterator[int]:
        """The session for one call: calls from several threads take turns (a session is used
        by one thread at a time); a call from a thread that is iterating a stream of this LLM
        would wait for that stream forever, so it is refused."""
        if threading.get_ident() in self._streaming:
            raise FgError("this LLM is busy with a stream this thread is iterating: finish or "
                          "close it first")
        with self._lock:
            yield self._handle()

    def _handle(self) -> int:
        if not self._h:
            raise FgError("this LLM is closed")
        return self._h

    def _info(self) -> Any:
        return lib.fgpy_info(self._handle()).contents

    @property
    def info(self) -> Dict[str, Any]:
        """What the session serves: model name, store, max_ctx, block_seqs, vocab_size,
        has_chat_template, bos_id, eos_id."""
        i = self._info()
        return {"model_name": (i.model_name or b"").decode(),
                "store_path": (i.store_path or b"").decode(), "max_ctx": i.max_ctx,
                "block_seqs": i.block_seqs, "vocab_size": i.vocab_size,
                "has_chat_template": bool(i.has_chat_template), "bos_id": i.bos_id,
                "eos_id": i.eos_id}

    def stats(self) -> Dict[str, float]:
        """Counters since open: requests, errors, prompt_tokens, completion_tokens, blocks,
        prefill_rows (rows the prefills computed, padding included), rows_shared (prompt rows
        score() copied from a context shared by several windows instead of computing them),
        busy_s."""
        v = (C.c_uint64 * 7)()
        busy = C.c_double()
        with self._busy() as h:
            lib.fgpy_stats(h, v, C.byref(busy))
        keys = ("requests", "errors", "prompt_tokens", "completion_tokens", "blocks",
                "prefill_rows", "rows_shared")
        d: Dict[str, float] = dict(zip(keys, v[:]))
        d["busy_s"] = busy.value
        return d

    # ---- generation

    def _request(self, p: SamplingParams, keep: list, prompt: Any = None,
                 messages: Any = None, chat_kwargs: Optional[dict] = None,
                 stream: bool = False) -> _lib.Request:
        p._check()
        r = _lib.Request()
        if messages is not None:
            b = json.dumps(messages).encode()
            keep.append(b)
            r.messages = b
            if chat_kwargs is not None:
                kb = json.dumps(chat_kwargs).encode()
                keep.append(kb)
                r.chat_kwargs = kb
        elif isinstance(prompt, str):
            r.prompt = prompt.encode()
            keep.append(r.prompt)
        elif isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt):
            arr = (C.c_int32 * max(len(prompt), 1))(*prompt)
            keep.append(arr)
            r.prompt_ids = C.cast(arr, C.POINTER(C.c_int32))
            r.n_prompt_ids = len(prompt)
        else:
            raise TypeError(f"a prompt is a str or a list of token ids, not {type(prompt).__name__}")
        stops = [p.stop] if isinstance(p.stop, str) else list(p.stop or [])
        if len(stops) > _lib.FG_REQ_MAX_STOPS:
            raise ValueError(f"stop: at most {_lib.FG_REQ_MAX_STOPS} stop strings")
        for i, s in enumerate(stops):
            if not isinstance(s, str) or not s:
                raise ValueError(f"stop: stop strings are non-empty str, not {s!r}")
            b = s.encode()
            keep.append(b)
            r.stops[i] = b
        r.n_stops = len(stops)
        r.max_tokens, r.min_tokens, r.ignore_eos = p.max_tokens, p.min_tokens, int(p.ignore_eos)
        r.temperature, r.top_p, r.min_p, r.top_k = p.temperature, p.top_p, p.min_p, p.top_k
        r.presence_penalty, r.frequency_penalty = p.presence_penalty, p.frequency_penalty
        r.repetition_penalty = p.repetition_penalty
        r.seed, r.has_seed = (p.seed or 0), int(p.seed is not None)
        r.n = p.n
        r.logprobs = -1 if p.logprobs is None else p.logprobs
        r.stream = int(stream)
        return r

    @staticmethod
    def _result(prompt: Optional[str], resp: _lib.Response, want_lp: bool) -> RequestOutput:
        ids = resp.prompt_ids[:resp.n_prompt] if resp.n_prompt else []
        out = RequestOutput(prompt, ids)
        for k in range(resp.n_choices):
            ch = resp.choices[k]
            toks = ch.tokens[:ch.n_tokens] if ch.n_tokens else []
            lps = None
            if want_lp and ch.logprob:
                lps = []
                for t in range(ch.n_tokens):
                    d = {toks[t]: float(ch.logprob[t])}
                    for a in range(ch.n_top):
                        e = ch.top[t * ch.n_top + a]
                        if e.id >= 0:
                            d.setdefault(e.id, float(e.logprob))
                    lps.append(d)
            text = C.string_at(ch.text).decode("utf-8", "replace") if ch.text else ""
            out.outputs.append(CompletionOutput(k, text, toks, _FINISH.get(ch.finish), lps))
        return out

    def _run(self, reqs: List[_lib.Request], prompts: List[Optional[str]],
             params: List[SamplingParams], on_piece: Optional[Any] = None) -> List[RequestOutput]:
        """fgpy_generate in a worker thread (interruptible); results converted and every
        response cleared there, whatever happens."""
        n = len(reqs)
        arr = (_lib.Request * max(n, 1))(*reqs)
        resp = (_lib.Response * max(n, 1))()
        cb = on_piece or _lib.PieceFn()

        def call() -> List[RequestOutput]:
            err = _lib.Err()
            try:
                rc = lib.fgpy_generate(h, arr, n, cb, None, resp, C.byref(err))
                _lib.check(rc, err)
                outs = []
                for i in range(n):
                    r = resp[i]
                    if r.status:
                        msg = r.error.decode("utf-8", "replace")
                        raise (ValueError(f"prompt {i}: {msg}") if r.status in (400, 413)
                               else FgError(f"prompt {i}: {msg}", r.status))
                    outs.append(self._result(prompts[i], r, params[i].logprobs is not None))
                return outs
            finally:
                for i in range(n):
                    lib.fg_response_clear(C.byref(resp[i]))

        with self._busy() as h:
            return _lib.call_interruptibly(call, lambda: lib.fgpy_interrupt(h))

    def generate(self, prompts: Union[str, List[int], Sequence[Union[str, List[int]]]],
                 sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None
                 ) -> List[RequestOutput]:
        """Continue each prompt (a str, or a list of token ids used as given); one result per
        prompt, in the order of the prompts. All prompts run together in the engine's blocks.
        sampling_params: one for all, or one per prompt (default SamplingParams()).
        Raises ValueError for a malformed request or one longer than max_ctx."""
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts
                                        and isinstance(prompts[0], int)):
            prompts = [prompts]  # type: ignore[list-item]
        prompts = list(prompts)
        params = self._params(sampling_params, len(prompts))
        keep: list = []
        reqs = [self._request(p, keep, prompt=q) for q, p in zip(prompts, params)]
        return self._run(reqs, [q if isinstance(q, str) else None for q in prompts], params)

    @staticmethod
    def _params(sp: Union[None, SamplingParams, Sequence[SamplingParams]],
                n: int) -> List[SamplingParams]:
        if sp is None:
            return [SamplingParams()] * n
        if isinstance(sp, SamplingParams):
            return [sp] * n
        sp = list(sp)
        if len(sp) != n:
            raise ValueError(f"sampling_params: {len(sp)} given for {n} prompts")
        return sp

    def chat(self, messages: Union[List[Dict[str, Any]], Sequence[List[Dict[str, Any]]]],
             sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None,
             chat_template_kwargs: Optional[Dict[str, Any]] = None) -> List[RequestOutput]:
        """Answer one conversation (a list of {"role", "content"} dicts) or several (a list of
        such lists) through the store's chat template with the generation prompt, as
        transformers' apply_chat_template(messages, add_generation_prompt=True) renders it.
        chat_template_kwargs are the template's variables (e.g. enable_thinking)."""
        if not messages:
            raise ValueError("messages: an empty conversation")
        convs = [messages] if isinstance(messages[0], dict) else list(messages)
        for c in convs:
            _check_messages(c)
        params = self._params(sampling_params, len(convs))
        keep: list = []
        reqs = [self._request(p, keep, messages=m, chat_kwargs=chat_template_kwargs)
                for m, p in zip(convs, params)]
        return self._run(reqs, [None] * len(convs), params)

    def apply_chat_template(self, messages: List[Dict[str, Any]],
                            chat_template_kwargs: Optional[Dict[str, Any]] = None) -> str:
        """The prompt text the chat template renders for messages (generation prompt added)."""
        out = C.c_void_p()
        err = _lib.Err()
        kw = None if chat_template_kwargs is None else json.dumps(chat_template_kwargs).encode()
        with self._busy() as h:
            _lib.check(lib.fgpy_chat_render(h, json.dumps(messages).encode(), kw, C.byref(out),
                                            C.byref(err)), err)
        return _lib.take_string(out.value)

    def stream(self, prompt: Union[str, List[int], None] = None,
               sampling_params: Optional[SamplingParams] = None, *,
               messages: Optional[List[Dict[str, Any]]] = None,
               chat_template_kwargs: Optional[Dict[str, Any]] = None) -> Iterator[str]:
        """Yield the text of one prompt's (or, with messages=, one conversation's) first
        choice as it is generated: whole UTF-8 characters, nothing past a stop string.
        Closing the iterator early cancels the request (the engine stops it at its next
        step). Ctrl-C while waiting stops the engine and raises KeyboardInterrupt."""
        p = sampling_params or SamplingParams()
        keep: list = []
        if messages is not None:
            _check_messages(messages)
            r = self._request(p, keep, messages=messages, chat_kwargs=chat_template_kwargs,
                              stream=True)
        else:
            r = self._request(p, keep, prompt=prompt, stream=True)
        q: "queue.Queue[Any]" = queue.Queue()
        cancel = threading.Event()
        done = object()

        def piece(ctx: Any, req: int, choice: int, text: Any, n: int, ids: Any, lp: Any,
                  n_ids: int, finish: int) -> int:
            if choice == 0 and n:
                q.put(C.string_at(text, n).decode("utf-8", "replace"))
            return 1 if cancel.is_set() else 0

        cb = _lib.PieceFn(piece)
        h = self._handle()
        box: Dict[str, Any] = {}

        def work() -> None:
            try:
                self._run([r], [prompt if isinstance(prompt, str) else None], [p], cb)
            except BaseException as e:  # noqa: BLE001 - handed to the iterating thread
                box["error"] = e
            finally:
                q.put(done)

        t = threading.Thread(target=work, name="fg-stream", daemon=True)
        me = threading.get_ident()
        self._streaming.add(me)
        t.start()
        try:
            while True:
                try:
                    item = q.get(timeout=0.05)
                except queue.Empty:
                    continue
                if item is done:
                    break
                yield item
            t.join()
        except BaseException:
            # Ctrl-C, or the consumer closed the generator: stop the engine, wait for it
            cancel.set()
            if t.is_alive():
                lib.fgpy_interrupt(h)
            t.join()
            raise
        finally:
            self._streaming.discard(me)
        if "error" in box:
            raise box["error"]

    # ---- scoring

    def score(self, contexts: Sequence[Union[str, List[int]]],
              continuations: Sequence[Union[str, List[int]]]) -> List[Tuple[float, bool]]:
        """For each (context, continuation): the continuation's summed log-prob given the
        context (natural log) and whether greedy decoding from the context produces exactly
        it, as lm-evaluation-harness's loglikelihood needs.

        Text or token ids on either side. A text context with a text continuation is split by
        lm-eval's rule: the context's trailing spaces move to the continuation, the joined text
        is encoded with the model's BOS rule and the continuation is the tokens past the
        context's own. A list of token ids is used as given (a text continuation after an ids
        context is encoded without specials). An empty context is the prefix token (BOS, else
        EOS). The window fed is context + continuation less its last token, cut from the left
        to max_ctx tokens (lm-eval's max_length = max_ctx). Requests whose windows are equal
        are computed once. Raises ValueError for a pair that cannot be scored (no continuation
        tokens, more than max_ctx of them, an id outside the vocabulary)."""
        if isinstance(contexts, str) or isinstance(continuations, str):
            raise TypeError("score takes lists of contexts and continuations")
        if len(contexts) != len(continuations):
            raise ValueError(f"score: {len(contexts)} contexts for {len(continuations)} "
                             "continuations")
        n = len(contexts)
        keep: list = []

        def side(items: Sequence[Any], what: str) -> Tuple[Any, Any, Any]:
            txt = (C.c_char_p * max(n, 1))()
            ids = (C.POINTER(C.c_int32) * max(n, 1))()
            lens = (C.c_uint32 * max(n, 1))()
            for i, c in enumerate(items):
                if isinstance(c, str):
                    txt[i] = c.encode()
                elif isinstance(c, (list, tuple)) and all(isinstance(t, int) for t in c):
                    arr = (C.c_int32 * max(len(c), 1))(*c)
                    keep.append(arr)
                    ids[i], lens[i] = C.cast(arr, C.POINTER(C.c_int32)), len(c)
                else:
                    raise TypeError(f"{what} {i}: a str or a list of token ids, not "
                                    f"{type(c).__name__}")
            return txt, ids, lens

        ca, ia, il = side(contexts, "context")
        na, ka, kl = side(continuations, "continuation")
        res = (_lib.ScoreRes * max(n, 1))()

        def call() -> List[Tuple[float, bool]]:
            err = _lib.Err()
            _lib.check(lib.fgpy_score(h, ca, ia, il, na, ka, kl, n, res, C.byref(err)), err)
            out = []
            for i in range(n):
                if res[i].status:
                    raise ValueError(f"pair {i}: " + res[i].error.decode("utf-8", "replace"))
                out.append((res[i].logprob, bool(res[i].is_greedy)))
            return out

        with self._busy() as h:
            return _lib.call_interruptibly(call, lambda: lib.fgpy_interrupt(h))

    def score_rolling(self, text: str) -> Tuple[float, int]:
        """The log-likelihood of a whole text (every token scored once, disjoint windows of
        max_ctx; the first token predicted from BOS when the model has one): (summed
        log-prob, tokens scored), lm-eval's loglikelihood_rolling."""

        def call() -> Tuple[float, int]:
            lp, nt, err = C.c_double(), C.c_uint64(), _lib.Err()
            _lib.check(lib.fgpy_score_rolling(h, text.encode(), C.byref(lp), C.byref(nt),
                                              C.byref(err)), err)
            return lp.value, nt.value

        with self._busy() as h:
            return _lib.call_interruptibly(call, lambda: lib.fgpy_interrupt(h))

    # ---- batch files

    def run_batch(self, input_path: str, output_path: str, resume: bool = True
                  ) -> Dict[str, Any]:
        """Run a JSONL batch file as ``fg-infer --input/--output`` does with this LLM's
        options: fg's own lines or OpenAI Batch lines in, one result line per request out
        (resumable by id / custom_id: with resume, lines already in output_path are kept and
        not run again). It opens its own engine for the job (so the memory of two while it
        runs). Returns {"prompts", "tokens", "saved"}. Ctrl-C stops the job between blocks
        (the results written so far stay) and raises KeyboardInterrupt.

        A store is open once per process, so the job runs with this LLM's engine closed and
        the LLM reopens it afterwards (planned again: seconds for a large model)."""
        flag = C.c_int(0)
        rep = (C.c_uint64 * 4)()
        o = self._opts
        ib, ob = str(input_path).encode(), str(output_path).encode()

        def call() -> Dict[str, Any]:
            err = _lib.Err()
            rc = lib.fgpy_run_jobs(C.byref(o), ib, ob, int(resume), C.byref(flag), rep,
                                   C.byref(err))
            if rc and rep[2]:
                raise KeyboardInterrupt
            _lib.check(rc, err)
            return {"prompts": rep[0], "tokens": rep[1], "saved": rep[3]}

        def stop() -> None:
            flag.value = 1

        with self._busy():
            lib.fgpy_close(self._h)
            self._h = None
            try:
                return _lib.call_interruptibly(call, stop)
            finally:
                self._reopen()
