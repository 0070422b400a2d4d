"""libfgpy.so through ctypes: loading, the C structs Python reads, errors, interruptible calls.

The library is the package's own copy (installed beside this file by the wheel), or the one
named by the FG_LIBRARY environment variable (the test suite points it at a build tree). No
compiler is needed at import time. The structs mirrored here are checked at import against the
library's own sizes and offsets (fgpy_layout), so a header change fails loudly, never silently.
"""
from __future__ import annotations

import ctypes as C
import errno as _errno
import os
import signal
import threading
from typing import Any, Callable, Optional, TypeVar

__all__ = ["lib", "FgError", "check", "call_interruptibly", "parse_size"]

FG_REQ_MAX_STOPS = 8
FG_ERR_MSG_MAX = 320
FG_ERR_STORE_BUSY = -45  # core/fg_error.h


class FgError(RuntimeError):
    """An fg failure that is not a missing file, a bad argument or a budget: its message is
    fg's one line (naming the file, tensor, flag or request at fault); ``code`` is fg's status
    (core/fg_error.h)."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.code = code


# ---- the C structs Python reads


class Err(C.Structure):
    _fields_ = [("code", C.c_int), ("sys_errno", C.c_int), ("msg", C.c_char * FG_ERR_MSG_MAX)]


class TokenLp(C.Structure):
    _fields_ = [("id", C.c_int32), ("logprob", C.c_float)]


class Choice(C.Structure):
    _fields_ = [("text", C.c_void_p), ("tokens", C.POINTER(C.c_int32)), ("n_tokens", C.c_uint32),
                ("finish", C.c_int), ("logprob", C.POINTER(C.c_float)),
                ("top", C.POINTER(TokenLp)), ("n_top", C.c_uint32)]


class Response(C.Structure):
    _fields_ = [("prompt_ids", C.POINTER(C.c_int32)), ("n_prompt", C.c_uint32),
                ("prompt_logprob", C.POINTER(C.c_float)), ("prompt_top", C.POINTER(TokenLp)),
                ("choices", C.POINTER(Choice)), ("n_choices", C.c_uint32),
                ("completion_tokens", C.c_uint64), ("seconds", C.c_double),
                ("status", C.c_int), ("error_type", C.c_char_p),
                ("error", C.c_char * FG_ERR_MSG_MAX)]


class ScoreRes(C.Structure):
    _fields_ = [("logprob", C.c_double), ("is_greedy", C.c_int), ("n_tokens", C.c_uint32),
                ("status", C.c_int), ("error", C.c_char * FG_ERR_MSG_MAX)]


class SessionInfo(C.Structure):
    _fields_ = [("model_name", C.c_char_p), ("store_path", C.c_char_p), ("max_ctx", C.c_uint32),
                ("block_seqs", C.c_uint32), ("vocab_size", C.c_uint32),
                ("has_chat_template", C.c_int), ("bos_id", C.c_int32), ("eos_id", C.c_int32)]


class Opts(C.Structure):
    _fields_ = [("store", C.c_char_p), ("ram_budget", C.c_uint64), ("gpu_budget", C.c_uint64),
                ("policy_auto", C.c_int), ("threads", C.c_int), ("backend", C.c_int),
                ("offload_dir", C.c_char_p), ("prefix_cache", C.c_char_p),
                ("prefix_budget", C.c_uint64), ("max_ctx", C.c_uint32),
                ("max_seqs", C.c_uint32), ("max_new", C.c_uint32), ("allow_lossy", C.c_int),
                ("compress_weight", C.c_int), ("quiet", C.c_int), ("compute", C.c_int),
                ("score_room", C.c_int)]


class Request(C.Structure):
    _fields_ = [("prompt", C.c_char_p), ("prompt_ids", C.POINTER(C.c_int32)),
                ("n_prompt_ids", C.c_uint32), ("messages", C.c_char_p),
                ("chat_kwargs", C.c_char_p), ("max_tokens", C.c_uint32),
                ("min_tokens", C.c_uint32), ("ignore_eos", C.c_int),
                ("temperature", C.c_double), ("top_p", C.c_double), ("min_p", C.c_double),
                ("top_k", C.c_int32), ("presence_penalty", C.c_double),
                ("frequency_penalty", C.c_double), ("repetition_penalty", C.c_double),
                ("seed", C.c_uint64), ("has_seed", C.c_int), ("n", C.c_uint32),
                ("stops", C.c_char_p * FG_REQ_MAX_STOPS), ("n_stops", C.c_int),
                ("logprobs", C.c_int), ("echo", C.c_int), ("stream", C.c_int)]


PieceFn = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_uint32, C.c_uint32, C.c_void_p, C.c_size_t,
                      C.POINTER(C.c_int32), C.POINTER(TokenLp), C.c_uint32, C.c_int)
ProgressFn = C.CFUNCTYPE(None, C.c_void_p, C.c_uint64, C.c_uint64)


def _off(t: Any, f: str) -> int:
    return getattr(t, f).offset


def _layout() -> list:
    """What fgpy_layout reports, computed from the mirrors above (same order as fgpy.c)."""
    R, Ch, S, I = Response, Choice, ScoreRes, SessionInfo
    return [C.sizeof(Err), _off(Err, "msg"), C.sizeof(TokenLp), _off(TokenLp, "logprob"),
            C.sizeof(Ch), _off(Ch, "text"), _off(Ch, "tokens"), _off(Ch, "n_tokens"),
            _off(Ch, "finish"), _off(Ch, "logprob"), _off(Ch, "top"), _off(Ch, "n_top"),
            C.sizeof(R), _off(R, "prompt_ids"), _off(R, "n_prompt"), _off(R, "prompt_logprob"),
            _off(R, "prompt_top"), _off(R, "choices"), _off(R, "n_choices"),
            _off(R, "completion_tokens"), _off(R, "seconds"), _off(R, "status"),
            _off(R, "error_type"), _off(R, "error"),
            C.sizeof(S), _off(S, "logprob"), _off(S, "is_greedy"), _off(S, "n_tokens"),
            _off(S, "status"), _off(S, "error"),
            C.sizeof(I), _off(I, "model_name"), _off(I, "store_path"), _off(I, "max_ctx"),
            _off(I, "block_seqs"), _off(I, "vocab_size"), _off(I, "has_chat_template"),
            _off(I, "bos_id"), _off(I, "eos_id"),
            C.sizeof(Opts), C.sizeof(Request), _off(Request, "stops"), _off(Request, "stream")]


def _load() -> C.CDLL:
    path = os.environ.get("FG_LIBRARY") or os.path.join(os.path.dirname(__file__), "libfgpy.so")
    try:
        so = C.CDLL(path)
    except OSError as e:
        raise ImportError(f"fg: cannot load {path}: {e} (build the package with "
                          "`pip install ./python`, or set FG_LIBRARY to a build's "
                          "python/libfgpy.so)") from e
    P, I32, U32, U64, D = C.c_void_p, C.c_int32, C.c_uint32, C.c_uint64, C.c_double
    E = C.POINTER(Err)
    sigs = {
        "fgpy_open": (C.c_int, [C.POINTER(Opts), C.POINTER(P), E]),
        "fgpy_close": (None, [P]),
        "fgpy_interrupt": (None, [P]),
        "fgpy_info": (C.POINTER(SessionInfo), [P]),
        "fgpy_stats": (None, [P, C.POINTER(U64), C.POINTER(D)]),
        "fgpy_free": (None, [P]),
        "fgpy_generate": (C.c_int, [P, C.POINTER(Request), U32, PieceFn, P,
                                    C.POINTER(Response), E]),
        "fg_response_clear": (None, [C.POINTER(Response)]),
        "fgpy_score": (C.c_int, [P, C.POINTER(C.c_char_p), C.POINTER(C.POINTER(I32)),
                                 C.POINTER(U32), C.POINTER(C.c_char_p),
                                 C.POINTER(C.POINTER(I32)), C.POINTER(U32), U32,
                                 C.POINTER(ScoreRes), E]),
        "fgpy_score_rolling": (C.c_int, [P, C.c_char_p, C.POINTER(D), C.POINTER(U64), E]),
        "fgpy_tokenize": (C.c_int, [P, C.c_char_p, C.c_int, C.POINTER(C.POINTER(I32)),
                                    C.POINTER(U32), E]),
        "fgpy_detokenize": (C.c_int, [P, C.POINTER(I32), U32, C.c_int, C.POINTER(P), E]),
        "fgpy_chat_render": (C.c_int, [P, C.c_char_p, C.c_char_p, C.POINTER(P), E]),
        "fgpy_run_jobs": (C.c_int, [C.POINTER(Opts), C.c_char_p, C.c_char_p, C.c_int,
                                    C.POINTER(C.c_int), C.POINTER(U64), E]),
        "fgpy_convert": (C.c_int, [C.c_char_p, C.c_char_p, C.c_int, U32, C.c_int, C.c_char_p,
                                   ProgressFn, C.POINTER(C.c_int), C.POINTER(D), E]),
        "fgpy_synth": (C.c_int, [C.c_char_p, C.c_char_p, U64, C.c_char_p, E]),
        "fgpy_inspect": (C.c_int, [C.c_char_p, C.c_int, C.c_int, C.POINTER(P), E]),
        "fgpy_layout": (C.c_int, [C.POINTER(U64), C.c_int]),
        "fgpy_version": (C.c_char_p, []),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(so, name)
        fn.restype, fn.argtypes = res, args
    want = _layout()
    got = (U64 * 64)()
    n = so.fgpy_layout(got, 64)
    if n != len(want) or list(got[:n]) != want:
        raise ImportError(f"fg: {path} was built from other headers than this package "
                          f"(struct layout {list(got[:n])} != {want}): rebuild the package")
    return so


lib = _load()

# fg_status codes (core/fg_error.h) that map onto Python's own exceptions
_VALUE = {-1, -13, -15, -16, -20, -70, -71, -72, -73, -74, -75}  # bad argument or input
_MISSING = {-5, -40, -42}                                  # not found, not a store, missing
_MEMORY = {-2, -23}                                        # out of memory, budget / space


def error(code: int, msg: str, sys_errno: int = 0) -> Exception:
    """The Python exception for fg status ``code`` with fg's one-line message."""
    if code in _MISSING or sys_errno == _errno.ENOENT:
        return FileNotFoundError(msg)
    if code in _MEMORY or sys_errno == _errno.ENOMEM:
        return MemoryError(msg)
    if code in _VALUE:
        return ValueError(msg)
    return FgError(msg, code)


def check(rc: int, err: Err) -> None:
    """Raise the exception for a failed call (rc != 0)."""
    if rc:
        raise error(rc, err.msg.decode("utf-8", "replace") or f"fg error {rc}", err.sys_errno)


def take_string(p: Optional[int]) -> str:
    """A malloc'ed C string: its text, then freed."""
    if not p:
        return ""
    try:
        return C.string_at(p).decode("utf-8", "replace")
    finally:
        lib.fgpy_free(p)


T = TypeVar("T")


def call_interruptibly(fn: Callable[[], T], interrupt: Callable[[], None]) -> T:
    """Run fn (a long foreign call) in a worker thread while this thread waits for it; ctypes
    releases the GIL during the foreign call, so other Python threads run meanwhile.

    Ctrl-C: on the main thread, with Python's default SIGINT handler in place, a handler of
    ours is installed for the call's duration; it only calls interrupt() (the engine stops at
    its next step), so no KeyboardInterrupt can land between the worker's start and its end
    and leave it running over freed memory. Once fn has returned (and cleaned up), the call
    raises KeyboardInterrupt. fn's own exception is re-raised here."""
    box: dict = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = e
        finally:
            done.set()

    hits: list = []

    def on_sigint(signum: int, frame: Any) -> None:
        hits.append(signum)
        interrupt()

    ours = (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    if ours:
        signal.signal(signal.SIGINT, on_sigint)
    try:
        threading.Thread(target=run, name="fg-call", daemon=True).start()
        while not done.wait(0.05):
            pass
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if hits:
        raise KeyboardInterrupt
    if "error" in box:
        raise box["error"]
    return box["value"]


def parse_size(v: Any, name: str) -> int:
    """Bytes from an int or a string such as "512M", "4GiB", "1.5G" (binary units, as
    fg-infer's --ram-budget); None is 0 (the default)."""
    if v is None:
        return 0
    if isinstance(v, bool):
        raise TypeError(f"{name}: expected bytes (int) or a size such as '4GiB', not {v!r}")
    if isinstance(v, int):
        if v < 1 << 20:
            raise ValueError(f"{name}: {v} bytes: at least 1M")
        return v
    if not isinstance(v, str):
        raise TypeError(f"{name}: expected bytes (int) or a size such as '4GiB', not {v!r}")
    s = v.strip()
    i = 0
    while i < len(s) and (s[i].isdigit() or s[i] == "."):
        i += 1
    num, unit = s[:i], s[i:].lower()
    mult = {"": 1, "b": 1}
    for k, p in zip("kmgt", range(1, 5)):
        for suf in ("", "b", "i", "ib"):
            mult[k + suf] = 1 << (10 * p)
    try:
        if unit not in mult:
            raise ValueError
        b = float(num) * mult[unit]
    except ValueError:
        raise ValueError(f"{name}: '{v}': expected a size such as 512M or 4GiB") from None
    if b != int(b) or b < 1 << 20:
        raise ValueError(f"{name}: '{v}': expected a whole number of bytes from 1M, such as "
                         "512M or 4GiB")
    return int(b)
