"""fg-serve end to end (issue 41): the shipped model (models/austen-opt) with a chat template
added (an overlay of its directory, converted here), served on an ephemeral port, checked with
the `openai` package's client (its types parse every answer) and with raw sockets:

  1. completions with echo + logprobs as lm-evaluation-harness sends them (token ids, max_tokens
     1, temperature 0): one log-prob a token, null first, the top alternatives; each prompt
     token's echo log-prob equals the log-prob the same token gets as a generated alternative
     after the prompt cut there (two paths through the engine agree); lists of prompts, n;
  2. chat (through the template; /tokenize of the messages counts the prompt tokens) with
     logprobs; streaming of both gives the text the plain request gives;
  3. /tokenize -> /detokenize round trip, /tokenizer_info, /v1/models, /metrics;
  4. errors as OpenAI error objects: 400 (bad JSON, unknown field, bad value, id outside the
     vocabulary), 401, 404, 405, 413 (Content-Length and chunked), 429 (queue full);
  5. robustness: a malformed request line, slowloris connections (closed after --timeout while
     others are served), a stream abandoned mid-way (counted as cancelled), then the server
     still answers exactly as before;
  6. SIGTERM while a request runs: the request completes, the process exits 0.

usage: serve_test.py FG-SERVE FG-CONVERT SOURCE-DIR WORKDIR   (exit 77: no openai package)
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

try:
    import openai
except ImportError:
    print("serve_test: the openai package is missing (scripts/setup.sh makes the test venv)")
    sys.exit(77)

SERVE, CONVERT, SRC, WORK = sys.argv[1:5]
KEY = "sk-test-key"
TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def make_store():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    ov = os.path.join(WORK, "austen")
    shutil.copytree(os.path.join(SRC, "models", "austen-opt"), ov)
    p = os.path.join(ov, "tokenizer_config.json")
    cfg = json.load(open(p))
    cfg["chat_template"] = TEMPLATE
    json.dump(cfg, open(p, "w"))
    subprocess.run([CONVERT, ov, "-o", ov + ".store", "--quiet"], check=True)
    return ov + ".store"


def start(store, *extra):
    # the policy's calibration, measured once into the build's cache (ctest sets it)
    env = dict(os.environ)
    env.setdefault("XDG_CACHE_HOME", os.path.join(WORK, "xdg"))
    log = open(os.path.join(WORK, "serve.log"), "w+")
    p = subprocess.Popen([SERVE, "-m", store, "--port", "0", "--threads", "2", *extra],
                         stdout=log, stderr=log, env=env)
    port = None
    for _ in range(300):
        log.seek(0)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read())
        if m:
            port = int(m.group(1))
            break
        if p.poll() is not None:
            break
        time.sleep(0.02)
    if port is None:
        log.seek(0)
        sys.exit("serve_test: fg-serve did not start:\n" + log.read())
    return p, port, log


def req(port, method, path, body=None, headers=None, key=KEY):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    h.update(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def wait_ready(port):
    seen = []
    for _ in range(500):
        st, _ = req(port, "GET", "/health", key=None)
        seen.append(st)
        if st == 200:
            return seen
        time.sleep(0.02)
    sys.exit("serve_test: /health never answered 200")


def err_of(st, data, want, what):
    check(st == want, f"{what}: status {st}, expected {want} ({data[:200]!r})")
    try:
        e = json.loads(data)["error"]
        check(isinstance(e["message"], str) and e["message"] and "type" in e,
              f"{what}: not an OpenAI error object: {data[:200]!r}")
        return e
    except (ValueError, KeyError, TypeError):
        check(False, f"{what}: not an OpenAI error object: {data[:200]!r}")
        return {}


def completions_echo(c, model, port):
    """1: the echo + logprobs contract lm-eval reads."""
    st, data = req(port, "POST", "/tokenize",
                   {"prompt": "It is a truth universally acknowledged, that a single man",
                    "add_special_tokens": True})
    ids = json.loads(data)["tokens"]
    r = c.completions.create(model=model, prompt=ids, max_tokens=1, temperature=0, echo=True,
                             logprobs=1)
    ch = r.choices[0]
    lp = ch.logprobs
    check(len(lp.tokens) == len(ids) + 1 and len(lp.token_logprobs) == len(ids) + 1,
          f"echo: {len(lp.tokens)} tokens for a prompt of {len(ids)} + 1")
    check(lp.token_logprobs[0] is None, "echo: the first prompt token's log-prob is not null")
    check(all(x is not None and x <= 0 for x in lp.token_logprobs[1:]), "echo: log-probs > 0")
    check(len(lp.top_logprobs) == len(ids) + 1, "echo: top_logprobs length")
    # greedy: the generated token is the most likely one, its log-prob the top's
    last = lp.top_logprobs[-1]
    check(abs(max(last.values()) - lp.token_logprobs[-1]) < 1e-6,
          "temperature 0 did not choose the most likely token")
    check(r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == 1, "echo usage")
    st, data = req(port, "POST", "/detokenize", {"tokens": ids})
    check(ch.text.startswith(json.loads(data)["prompt"]) and len(ch.text) > len(json.loads(data)["prompt"]),
          f"echo text {ch.text!r}")
    # streamed with echo: the same text
    s = c.completions.create(model=model, prompt=ids, max_tokens=5, temperature=0, echo=True,
                             stream=True)
    streamed = "".join(x.text for chunk in s for x in chunk.choices)
    whole = c.completions.create(model=model, prompt=ids, max_tokens=5, temperature=0, echo=True)
    check(streamed == whole.choices[0].text, f"echo stream {streamed!r} vs {whole.choices[0].text!r}")
    # two paths agree: the echo log-prob of ids[i] = its log-prob as an alternative after ids[:i]
    compared = 0
    for i in range(2, len(ids)):
        g = c.completions.create(model=model, prompt=ids[:i], max_tokens=1, temperature=0,
                                 logprobs=20)
        alts = g.choices[0].logprobs.top_logprobs[0]
        tok = lp.tokens[i]
        if tok in alts:
            compared += 1
            check(abs(alts[tok] - lp.token_logprobs[i]) < 1e-3,
                  f"echo log-prob of token {i} ({tok!r}) {lp.token_logprobs[i]} vs "
                  f"{alts[tok]} generated")
    check(compared >= 3, f"only {compared} prompt tokens among the generated alternatives")
    # a list of prompts (strings) with n = 2: prompts x n choices, indexed in order
    r = c.completions.create(model=model, prompt=["She was", "He had"], n=2, max_tokens=3,
                             temperature=0.8, seed=7)
    check(sorted(x.index for x in r.choices) == [0, 1, 2, 3], "prompts x n choices")
    check(r.usage.completion_tokens == 12, f"usage {r.usage}")
    # seeded sampling is reproducible through the server
    a = c.completions.create(model=model, prompt="Emma", max_tokens=8, temperature=1, seed=3)
    b = c.completions.create(model=model, prompt="Emma", max_tokens=8, temperature=1, seed=3)
    check(a.choices[0].text == b.choices[0].text, "seed 3 gave two texts")


def chat_and_stream(c, model, port):
    """2: chat and streaming."""
    msgs = [{"role": "user", "content": "Who is Mr. Darcy?"}]
    r = c.chat.completions.create(model=model, messages=msgs, max_tokens=6, temperature=0,
                                  logprobs=True, top_logprobs=2)
    ch = r.choices[0]
    check(ch.message.role == "assistant" and isinstance(ch.message.content, str), "chat message")
    st, data = req(port, "POST", "/tokenize", {"messages": msgs})
    check(st == 200 and json.loads(data)["count"] == r.usage.prompt_tokens,
          f"chat prompt tokens {r.usage.prompt_tokens} vs /tokenize {data[:100]!r}")
    content = ch.logprobs.content
    check(len(content) == r.usage.completion_tokens, "chat: one log-prob entry a token")
    check(all(len(x.top_logprobs) == 2 and x.logprob <= 0 for x in content), "chat top_logprobs")
    plain = c.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0)
    s = c.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0,
                                  stream=True)
    text, finish = "", None
    for chunk in s:
        for x in chunk.choices:
            text += x.delta.content or ""
            finish = x.finish_reason or finish
    check(text == plain.choices[0].message.content,
          f"chat stream {text!r} vs {plain.choices[0].message.content!r}")
    check(finish == plain.choices[0].finish_reason, "chat stream finish_reason")
    plain = c.completions.create(model=model, prompt="It was", max_tokens=16, temperature=0)
    s = c.completions.create(model=model, prompt="It was", max_tokens=16, temperature=0,
                             stream=True, stream_options={"include_usage": True})
    text, usage, n = "", None, 0
    for chunk in s:
        n += 1
        text += "".join(x.text for x in chunk.choices)
        usage = chunk.usage or usage
    check(text == plain.choices[0].text, f"stream {text!r} vs {plain.choices[0].text!r}")
    check(n >= 3, f"the stream came as {n} chunks")
    check(usage is not None and usage.completion_tokens == plain.usage.completion_tokens,
          "stream usage chunk")


def tokenizer_routes(c, model, port):
    """3: tokenizer routes, models, metrics."""
    text = "Mr. Bennet was among the earliest of those who waited on Mr. Bingley."
    st, data = req(port, "POST", "/tokenize", {"prompt": text, "add_special_tokens": False,
                                               "return_token_strs": True})
    t = json.loads(data)
    check(st == 200 and t["count"] == len(t["tokens"]) == len(t["token_strs"]), "tokenize")
    st, data = req(port, "POST", "/detokenize", {"tokens": t["tokens"]})
    check(st == 200 and json.loads(data)["prompt"] == text, f"round trip: {data[:200]!r}")
    st, data = req(port, "POST", "/tokenize", {"prompt": text})
    check(json.loads(data)["tokens"][0] == 2, "add_special_tokens (default true): BOS first")
    st, data = req(port, "GET", "/tokenizer_info")
    info = json.loads(data)
    check(st == 200 and info["eos_token"] == "</s>" and info["vocab_size"] == 8192, f"info {info}")
    check([m.id for m in c.models.list()] == [model], "models")


def errors(c, model, port):
    """4: error statuses and objects."""
    err_of(*req(port, "POST", "/v1/completions", "{not json"), 400, "bad JSON")
    e = err_of(*req(port, "POST", "/v1/completions", {"prompt": "x", "max_tokens": "5"}), 400,
               "max_tokens a string")
    check(e.get("param") == "max_tokens", f"param {e.get('param')}")
    e = err_of(*req(port, "POST", "/v1/completions", {"prompt": "x", "frobnicate": 1}), 400,
               "unknown field")
    check("frobnicate" in e.get("message", ""), "the unknown field is named")
    err_of(*req(port, "POST", "/v1/completions", {"prompt": [1, 99999]}), 400, "id outside")
    err_of(*req(port, "POST", "/v1/completions", {"prompt": "x", "n": 0}), 400, "n 0")
    err_of(*req(port, "POST", "/v1/chat/completions", {"messages": []}), 400, "no messages")
    err_of(*req(port, "POST", "/v1/completions", {"prompt": "x " * 2000, "max_tokens": 4}), 413,
           "prompt longer than the context")
    err_of(*req(port, "POST", "/v1/completions", {"prompt": "x"}, key=None), 401, "no key")
    err_of(*req(port, "POST", "/v1/completions", {"prompt": "x"}, key="wrong"), 401, "bad key")
    err_of(*req(port, "GET", "/v1/nothing"), 404, "no route")
    err_of(*req(port, "GET", "/../../etc/passwd"), 404, "a path outside")
    err_of(*req(port, "GET", "/v1/completions"), 405, "GET completions")
    c405 = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c405.request("DELETE", "/tokenize")
    r405 = c405.getresponse()
    r405.read()
    check(r405.status == 405 and r405.getheader("Allow") == "POST", "405's Allow header")
    c405.close()
    # a Content-Length over --max-body: refused before any of the body is read
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
              KEY.encode() + b"\r\nContent-Length: 2000000\r\n\r\n" + b"x" * 1000)
    s.settimeout(10)
    head = s.recv(4096)
    check(head.startswith(b"HTTP/1.1 413") and b'"error"' in head,
          f"Content-Length over --max-body: {head[:200]!r}")
    s.close()
    # a chunked body growing past --max-body
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
              KEY.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(300):
        s.sendall(b"1000\r\n" + b"y" * 4096 + b"\r\n")
    s.sendall(b"0\r\n\r\n")
    head = s.recv(100)
    check(head.startswith(b"HTTP/1.1 413"), f"chunked over --max-body: {head!r}")
    s.close()
    # the queue full: --max-queue 2, 16 requests at once while blocks run
    stats = []

    def one():
        stats.append(req(port, "POST", "/v1/completions",
                         {"prompt": "It was", "max_tokens": 200, "ignore_eos": True,
                          "temperature": 0})[0])
    ts = [threading.Thread(target=one) for _ in range(16)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    check(429 in stats and 200 in stats and set(stats) <= {200, 429}, f"queue full: {stats}")


def robustness(c, model, port):
    """5: malformed, slow, abandoned; then the same answers."""
    before = c.completions.create(model=model, prompt="Anne Elliot", max_tokens=10,
                                  temperature=0).choices[0].text
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GARBAGE\x00\xff LINE\r\n\r\n")
    s.settimeout(5)
    try:
        got = s.recv(100)
    except socket.timeout:
        got = b"(nothing in 5 s)"
    check(got == b"" or got.startswith(b"HTTP/1.1 400"), f"malformed request line: {got!r}")
    s.close()
    slow = []
    for _ in range(8):  # slowloris: headers never finished
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-a: ")
        slow.append(s)
    t0 = time.time()
    check(c.completions.create(model=model, prompt="Anne Elliot", max_tokens=10,
                               temperature=0).choices[0].text == before,
          "answers while slow clients hang")
    for s in slow:
        s.settimeout(10)
        try:
            closed = s.recv(100) is not None
        except (socket.timeout, ConnectionResetError):
            closed = False
        check(closed and time.time() - t0 < 9, "a slowloris connection was not closed by "
              "--timeout")
        s.close()
    # abandoned mid-stream: read a chunk, close the socket
    s = socket.create_connection(("127.0.0.1", port))
    body = json.dumps({"prompt": "It was", "max_tokens": 400, "ignore_eos": True,
                       "stream": True, "temperature": 0}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
              KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: " +
              str(len(body)).encode() + b"\r\n\r\n" + body)
    first = s.recv(4096)
    check(b"200" in first.split(b"\r\n")[0], f"stream head {first[:80]!r}")
    s.close()
    cancelled = 0
    for _ in range(100):
        st, m = req(port, "GET", "/metrics")
        found = re.search(rb"fg_requests_cancelled_total (\d+)", m)
        cancelled = int(found.group(1)) if found else 0
        running = re.search(rb"fg_requests_running (\d+)", m)
        if cancelled and running and running.group(1) == b"0":
            break
        time.sleep(0.05)
    check(cancelled >= 1, "the abandoned stream was not cancelled")
    # abandoned while waiting for a whole (not streamed) answer: cancelled within 100 ms or so
    s = socket.create_connection(("127.0.0.1", port))
    body = json.dumps({"prompt": "It was", "max_tokens": 500, "ignore_eos": True,
                       "temperature": 0}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
              KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: " +
              str(len(body)).encode() + b"\r\n\r\n" + body)
    time.sleep(0.05)
    s.close()
    before_c = cancelled
    for _ in range(100):
        st, m = req(port, "GET", "/metrics")
        found = re.search(rb"fg_requests_cancelled_total (\d+)", m)
        cancelled = int(found.group(1)) if found else 0
        running = re.search(rb"fg_requests_running (\d+)", m)
        if cancelled > before_c and running and running.group(1) == b"0":
            break
        time.sleep(0.05)
    check(cancelled > before_c, "the abandoned plain request was not cancelled")
    after = c.completions.create(model=model, prompt="Anne Elliot", max_tokens=10,
                                 temperature=0).choices[0].text
    check(after == before, f"after the abuse: {after!r} vs {before!r}")
    st, m = req(port, "GET", "/metrics")
    for name in (b"fg_time_to_first_token_seconds_count", b"fg_inter_token_latency_seconds_count",
                 b"fg_prompt_tokens_total", b"fg_generation_tokens_total", b"fg_queue_depth",
                 b"fg_pager_read_bytes_total", b"fg_resident_memory_bytes"):
        check(re.search(name + rb"(\{[^}]*\})? [1-9]", m) or name == b"fg_queue_depth",
              f"/metrics: {name.decode()} missing or zero")


def drain(store):
    """6: SIGTERM with a request running: it completes, exit 0."""
    p, port, log = start(store, "--quiet")
    wait_ready(port)
    # the port taken: one line naming it, exit 1; usage errors exit 2
    r = subprocess.run([SERVE, "-m", store, "--port", str(port)], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 1 and f"port {port}" in r.stderr and r.stderr.count("\n") <= 2,
          f"a taken port: exit {r.returncode}, {r.stderr!r}")
    for bad in ([], ["-m", store, "--port", "70000"], ["-m", store, "--host", "localhost"]):
        r = subprocess.run([SERVE, *bad], capture_output=True, text=True, timeout=60)
        want = 1 if "--host" in bad else 2
        check(r.returncode == want and r.stderr.startswith("fg-serve: "),
              f"fg-serve {' '.join(bad)}: exit {r.returncode}, {r.stderr!r}")
    out = {}

    def long_one():
        out["r"] = req(port, "POST", "/v1/completions",
                       {"prompt": "It was", "max_tokens": 300, "ignore_eos": True,
                        "temperature": 0}, key=None)
    t = threading.Thread(target=long_one)
    t.start()
    for _ in range(200):
        st, m = req(port, "GET", "/metrics", key=None)
        if re.search(rb"fg_requests_running [1-9]", m):
            break
        time.sleep(0.01)
    p.send_signal(signal.SIGTERM)
    t.join(60)
    rc = p.wait(60)
    st, data = out.get("r", (0, b""))
    check(st == 200 and json.loads(data)["usage"]["completion_tokens"] == 300,
          f"the request running at SIGTERM: {st} {data[:120]!r}")
    check(rc == 0, f"exit status {rc} after SIGTERM")


def main():
    t0 = time.time()
    store = make_store()
    print(f"serve_test: store: {time.time() - t0:.1f} s", flush=True)
    p, port, log = start(store, "--api-key", KEY, "--timeout", "2", "--max-body", "1M",
                         "--max-queue", "2")
    try:
        seen = wait_ready(port)
        print(f"serve_test: ready: {time.time() - t0:.1f} s", flush=True)
        check(set(seen) <= {503, 200}, f"/health while loading: {seen}")
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)
        model = c.models.list().data[0].id
        for part in (completions_echo, chat_and_stream, tokenizer_routes, errors, robustness):
            t0 = time.time()
            part(c, model, port)
            print(f"serve_test: {part.__name__}: {time.time() - t0:.1f} s", flush=True)
    finally:
        t0 = time.time()
        p.send_signal(signal.SIGTERM)
        rc = p.wait(60)
        check(rc == 0, f"exit status {rc}")
        print(f"serve_test: SIGTERM to exit: {time.time() - t0:.1f} s", flush=True)
    t0 = time.time()
    drain(store)
    print(f"serve_test: drain: {time.time() - t0:.1f} s", flush=True)
    if failures:
        log.seek(0)
        print(log.read()[-3000:])
        print(f"serve_test: {len(failures)} failures")
        sys.exit(1)
    print("serve_test: ok")


main()
