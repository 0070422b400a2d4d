"""fg: out-of-core LLM generation (FlexGen rebuilt in C) from Python.

    import fg
    fg.convert("opt-1.3b/", "opt-1.3b.store")
    with fg.LLM("opt-1.3b.store", ram_budget="4GiB") as llm:
        for out in llm.generate(["Paris is"], fg.SamplingParams(max_tokens=16, temperature=0)):
            print(out.text)

Everything runs in libfg (the C library, bundled as libfgpy.so); this package converts
arguments and results. See docs/python.md.
"""
from ._lib import FgError, lib as _lib_handle
from .llm import LLM, CompletionOutput, RequestOutput, SamplingParams, Tokenizer
from .tools import convert, inspect

__version__ = "0.1.0"
libfg_version: str = _lib_handle.fgpy_version().decode()

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Tokenizer",
           "convert", "inspect", "FgError", "libfg_version", "__version__"]
