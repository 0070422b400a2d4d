"""fg.convert and fg.inspect: fg-convert's and fg-inspect's library calls from Python."""
from __future__ import annotations

import ctypes as C
import json
import os
import shutil
import sys
import time
from typing import Any, Callable, Dict, Optional, Union

from . import _lib
from ._lib import lib

__all__ = ["convert", "inspect"]

ProgressArg = Union[None, bool, Callable[[int, int], None]]


class _Bar:
    """A one-line progress bar on a terminal (stderr), as fg-convert draws its own."""

    def __init__(self, label: str):
        self.label, self.last, self.t0 = label, 0.0, time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < 0.1 and done < total:
            return
        self.last = now
        frac = done / total if total else 0.0
        width = 30
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        rate = done / max(now - self.t0, 1e-9) / 1e6
        sys.stderr.write(f"\r{self.label} [{bar}] {frac * 100:5.1f}%  {done / 1e9:.2f}/"
                         f"{total / 1e9:.2f} GB  {rate:.0f} MB/s")
        sys.stderr.flush()

    def end(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()


def convert(src: str, dst: str, compress_weight: bool = False, weight_bits: int = 4,
            group_size: Optional[int] = None, group_axis: Optional[int] = None,
            tokenizer_dir: Optional[str] = None, progress: ProgressArg = None
            ) -> Dict[str, Any]:
    """Convert a checkpoint (a Hugging Face directory of safetensors or pytorch_model.bin, a
    FlexGen numpy directory, a .gguf file) or an existing store into a new store at dst, as
    ``fg-convert SRC -o DST`` does: weights as F16, or with compress_weight as weight_bits (4
    or 8) groups of group_size along group_axis (0: FlexGen's, 1: the input axis). All or
    nothing: on failure no store is left at dst.

    progress: a callable (bytes_done, bytes_total), True for a bar on stderr, False for none;
    None (the default): a bar when stderr is a terminal.

    Returns {"tensors", "source_bytes", "stored_bytes", "seconds"}. Raises FileNotFoundError
    for a missing source, ValueError for bad options or a checkpoint fg refuses (the message
    names the file and tensor), fg.FgError otherwise. Ctrl-C stops the conversion at its next
    chunk (a few MiB of weights): what it wrote is removed, as on any failure, and
    KeyboardInterrupt is raised.
    """
    if weight_bits not in (4, 8):
        raise ValueError(f"weight_bits must be 4 or 8, not {weight_bits!r}")
    if not compress_weight and (group_size is not None or group_axis is not None):
        raise ValueError("group_size and group_axis belong to compress_weight=True")
    if group_axis not in (None, 0, 1):
        raise ValueError(f"group_axis must be 0 or 1, not {group_axis!r}")
    bar: Optional[_Bar] = None
    fn: Optional[Callable[[int, int], None]] = None
    if callable(progress):
        fn = progress
    elif progress or (progress is None and sys.stderr.isatty()):
        bar = _Bar(f"converting {os.path.basename(os.path.normpath(src))}")
        fn = bar
    errors: list = []

    def on_progress(ctx: Any, done: int, total: int) -> None:
        if fn is None or errors:
            return
        try:
            fn(done, total)
        except BaseException as e:  # noqa: BLE001 - reported after the call
            errors.append(e)

    cb = _lib.ProgressFn(on_progress) if fn else _lib.ProgressFn()
    existed = os.path.exists(dst)
    rep = (C.c_double * 4)()
    bits = weight_bits if compress_weight else 0
    stop = C.c_int(0)

    def call() -> None:
        err = _lib.Err()
        rc = lib.fgpy_convert(str(src).encode(), str(dst).encode(), bits, group_size or 0,
                              -1 if group_axis is None else group_axis,
                              None if tokenizer_dir is None else str(tokenizer_dir).encode(),
                              cb, C.byref(stop), rep, C.byref(err))
        _lib.check(rc, err)

    def interrupt() -> None:
        stop.value = 1

    try:
        _lib.call_interruptibly(call, interrupt)
    except KeyboardInterrupt:
        _remove_new(dst, existed)  # interrupted after its last chunk: a whole store, removed
        raise
    finally:
        if bar:
            bar.end()
    if errors:
        raise errors[0]
    return {"tensors": int(rep[0]), "source_bytes": int(rep[1]), "stored_bytes": int(rep[2]),
            "seconds": rep[3]}


def _remove_new(dst: str, existed: bool) -> None:
    if not existed:
        shutil.rmtree(dst, ignore_errors=True)


def inspect(store: str, verify: bool = False, chunks: bool = True) -> Dict[str, Any]:
    """What ``fg-inspect --json STORE`` prints, as a dict: the store's info, its model
    (family, sizes, tokenizer), files, tensors (with their chunks unless chunks=False),
    metadata and KV page usage; with verify, every checksum is checked first (a "verify"
    entry). Raises FileNotFoundError or fg.FgError with fg-inspect's one-line message."""
    if not os.path.exists(store):
        raise FileNotFoundError(f"{store}: no such file or directory")
    out = C.c_void_p()
    err = _lib.Err()
    _lib.check(lib.fgpy_inspect(str(store).encode(), int(verify), int(chunks), C.byref(out),
                                C.byref(err)), err)
    return json.loads(_lib.take_string(out.value))


def _synth(model: str, dst: str, tokenizer_dir: str, seed: int = 0) -> None:
    """Random weights at a known model's shape (``fg-convert synth``), for tests and
    benchmarks."""
    err = _lib.Err()
    _lib.check(lib.fgpy_synth(model.encode(), str(dst).encode(), seed,
                              str(tokenizer_dir).encode(), C.byref(err)), err)
