"""serve_load.py - N concurrent clients against fg-serve (bench/serve.sh): each client takes the
next prompt of a JSONL file (fg's job lines: "prompt") and sends it as a streamed
/v1/completions request (temperature 0, ignore_eos, max_tokens M), until R requests are done.
Prints one line of figures: requests/s, generated tokens/s, time to first token and
inter-token latency (p50, p99) over all requests. Standard library only.

usage: serve_load.py PORT PROMPTS.jsonl CLIENTS REQUESTS MAX_TOKENS
"""
import http.client
import json
import sys
import threading
import time

port, path, clients, total, max_tokens = (int(sys.argv[1]), sys.argv[2], int(sys.argv[3]),
                                          int(sys.argv[4]), int(sys.argv[5]))
prompts = [json.loads(line)["prompt"] for line in open(path) if line.strip()]
lock = threading.Lock()
state = {"next": 0}
ttft, itl, tokens, errors = [], [], [], []


def one(prompt):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        return f"status {r.status}: {r.read()[:200]!r}"
    first, last, gaps, n = None, None, [], 0
    for line in r:
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        ev = json.loads(line[6:])
        now = time.perf_counter()
        if ev.get("usage"):
            n = ev["usage"]["completion_tokens"]
            continue
        if not any(ch.get("text") for ch in ev["choices"]):
            continue
        if first is None:
            first = now - t0
        else:
            gaps.append(now - last)
        last = now
    c.close()
    with lock:
        ttft.append(first if first is not None else time.perf_counter() - t0)
        itl.extend(gaps)
        tokens.append(n)
    return None


def client():
    while True:
        with lock:
            i = state["next"]
            if i >= total:
                return
            state["next"] = i + 1
        e = one(prompts[i % len(prompts)])
        if e:
            with lock:
                errors.append(e)


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


t0 = time.perf_counter()
ts = [threading.Thread(target=client) for _ in range(clients)]
[t.start() for t in ts]
[t.join() for t in ts]
wall = time.perf_counter() - t0
if errors:
    print(f"serve_load: {len(errors)} failed requests, the first: {errors[0]}", file=sys.stderr)
    sys.exit(1)
print(f"clients {clients:3d}: {total} requests in {wall:.2f} s: {total / wall:.2f} req/s, "
      f"{sum(tokens) / wall:.1f} tok/s; TTFT p50 {pct(ttft, 50) * 1000:.0f} ms "
      f"p99 {pct(ttft, 99) * 1000:.0f} ms; inter-token p50 {pct(itl, 50) * 1000:.1f} ms "
      f"p99 {pct(itl, 99) * 1000:.1f} ms")
print(f"TOKS {sum(tokens) / wall:.3f}")
