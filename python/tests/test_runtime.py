"""Threads, leaks and Ctrl-C."""
import gc
import os
import signal
import threading
import time

import pytest

import fg

SP = fg.SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)


def test_two_llms_in_two_threads(spare_stores):
    prompts = ["Hello world", "Once upon a time", "The answer is"]
    want = []
    for st in spare_stores:
        with fg.LLM(st, ram_budget="1GiB", threads=1, max_ctx=64) as ref_llm:
            want.append([o.token_ids for o in ref_llm.generate(prompts, SP)])
    assert want[0] != want[1]  # two different models
    results, errors = {}, []

    def worker(k):
        try:
            with fg.LLM(spare_stores[k], ram_budget="1GiB", threads=1, max_ctx=64) as llm:
                results[k] = [[o.token_ids for o in llm.generate(prompts, SP)]
                              for _ in range(5)]
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    for k in range(2):
        assert all(r == want[k] for r in results[k])


def test_one_llm_shared_by_threads(tiny_llm):
    """Calls from several threads on one LLM are serialized, each gets its own results."""
    want = tiny_llm.generate(["abc"], SP)[0].token_ids
    got, errors = [], []

    def worker():
        try:
            for _ in range(5):
                got.append(tiny_llm.generate(["abc"], SP)[0].token_ids)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=worker) for _ in range(3)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors and got == [want] * 15


def rss_kib():
    with open("/proc/self/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    return 0


@pytest.mark.skipif(os.environ.get("FG_TEST_SANITIZED") == "1",
                    reason="under ASan freed memory stays in its quarantine: RSS says nothing")
def test_no_leak_over_1000_generates(tiny_llm):
    sp = fg.SamplingParams(max_tokens=2, temperature=0.7, seed=1, logprobs=2, stop=["zz"])
    for _ in range(100):  # warm: allocator arenas, caches
        tiny_llm.generate(["leak check"], sp)
    gc.collect()
    before = rss_kib()
    t0 = time.monotonic()
    for _ in range(1000):
        tiny_llm.generate(["leak check"], sp)
    gc.collect()
    grown = rss_kib() - before
    # one leaked response per call (ids, text, 2 log-prob rows) would be >= 100 bytes x 1000
    assert grown < 2048, f"RSS grew {grown} KiB over 1000 calls ({time.monotonic() - t0:.1f} s)"


def _sigint_after(seconds):
    t = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    t.start()
    return t


def test_ctrl_c_during_generate(spare_stores):
    with fg.LLM(spare_stores[0], ram_budget="1GiB", threads=1, max_ctx=320, max_seqs=4) as llm:
        long = fg.SamplingParams(max_tokens=300, temperature=0, ignore_eos=True)
        t0 = time.monotonic()
        full = llm.generate(["warm"] * 4, long)  # how long an uninterrupted call takes
        took = time.monotonic() - t0
        assert len(full) == 4
        timer = _sigint_after(took / 3)  # inside the first of its two blocks
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            llm.generate(["interrupt me"] * 8, long)  # two blocks: twice as long
        stopped = time.monotonic() - t0
        timer.join()
        assert stopped < took, (stopped, took)
        # the session stays usable, and gives the same results as before
        again = llm.generate(["warm"], fg.SamplingParams(max_tokens=8, temperature=0,
                                                         ignore_eos=True))
        assert again[0].token_ids == full[0].token_ids[:8]


def test_ctrl_c_during_stream(spare_stores):
    with fg.LLM(spare_stores[1], ram_budget="1GiB", threads=1, max_ctx=512) as llm:
        it = llm.stream("go on", fg.SamplingParams(max_tokens=480, temperature=0,
                                                   ignore_eos=True))
        next(it)
        timer = _sigint_after(0.05)
        with pytest.raises(KeyboardInterrupt):
            for _ in it:
                time.sleep(0.01)
        it.close()  # stops the engine if Ctrl-C landed in the loop's body, not in the iterator
        timer.join()
        assert llm.generate("x", fg.SamplingParams(max_tokens=1))


def test_generate_releases_the_gil(tiny_llm):
    """Python threads run while a generate call is in libfg (ctypes releases the GIL)."""
    ticks = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        t0 = time.monotonic()
        tiny_llm.generate(["spin"] * 4, fg.SamplingParams(max_tokens=64, temperature=0,
                                                          ignore_eos=True))
        took = time.monotonic() - t0
    finally:
        stop.set()
        t.join()
    assert ticks[0] > 1000 * took, (ticks[0], took)
