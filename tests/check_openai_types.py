"""check_openai_types.py - every object fg's OpenAI writers produce, parsed by the openai
package's own types (pydantic validation, not the client's lenient construct), plus the
relations between fields the types cannot state.

Input: openai_emit's "KIND<TAB>JSON" lines on stdin. Exit 0 when all pass, 1 with one line per
failure, 77 when the openai package is absent (ctest's skip). With --any, any subset of kinds
is accepted (e.g. a real job's results: sed 's/^/batch\t/' OUT.jsonl | check_openai_types.py
--any); without it every kind must appear.

Two places where the package's types are narrower than the API they describe, and fg follows
the API (as OpenAI's legacy completions and vLLM write it; lm-evaluation-harness reads it):
  - with echo, the first prompt token has no log-prob: token_logprobs[0] and top_logprobs[0]
    are null, where the types say List[float] and List[Dict[str, float]];
  - a completions stream chunk before the last has finish_reason null, where the type (shared
    by Completion and its chunks) lists only the final values.
A validation error is accepted at exactly those places and nowhere else.
"""
import json
import sys

try:
    import pydantic
    from openai.types import Completion, ErrorObject
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
except ImportError as e:  # the test venv is not there
    print(f"skip: {e}")
    sys.exit(77)

failures = []


def fail(kind, n, what):
    failures.append(f"line {n} ({kind}): {what}")


def validate(model, obj, allowed):
    """model.model_validate(obj); errors at locations outside allowed(loc, obj) are failures."""
    try:
        return model.model_validate(obj), []
    except pydantic.ValidationError as e:
        bad = [err for err in e.errors() if not allowed(err["loc"], obj)]
        return None, [f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in bad]


def echo_null(loc, obj):
    # choices.I.logprobs.(token_logprobs|top_logprobs).0 holding null
    if len(loc) != 5 or loc[0] != "choices" or loc[2] != "logprobs" or loc[4] != 0:
        return False
    return loc[3] in ("token_logprobs", "top_logprobs") and \
        obj["choices"][loc[1]]["logprobs"][loc[3]][0] is None


def chunk_open(loc, obj):
    return len(loc) == 3 and loc[0] == "choices" and loc[2] == "finish_reason" and \
        obj["choices"][loc[1]]["finish_reason"] is None


def check_legacy(kind, n, text, lp):
    toks, lps, tops, offs = lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], lp["text_offset"]
    if not (len(toks) == len(lps) == len(tops) == len(offs)):
        fail(kind, n, "logprobs lists of different lengths")
    # offsets index the text the tokens' bytes spell: the choice's text when they spell it
    # (no BOS the tokenizer added, no stop string cut off, no character split across tokens)
    if "".join(toks) == text:
        for i, (t, o) in enumerate(zip(toks, offs)):
            if text[o:o + len(t)] != t:
                fail(kind, n, f"text_offset[{i}] {o}: text there is not token {t!r}")
    if offs and (offs[0] != 0 or any(b < a for a, b in zip(offs, offs[1:]))):
        fail(kind, n, f"text_offset {offs} does not start at 0 and grow")
        if tops[i] is not None and lps[i] is not None and t in tops[i] and \
                abs(tops[i][t] - lps[i]) > 1e-6 and "\ufffd" not in t:
            fail(kind, n, f"top_logprobs[{i}] gives the chosen token another log-prob")
    for v in lps:
        if v is not None and v > 0:
            fail(kind, n, f"a log-prob above 0: {v}")


def check_completion(kind, n, obj, chunk=False):
    allowed = (lambda loc, o: echo_null(loc, o) or chunk_open(loc, o)) if chunk else echo_null
    _, errs = validate(Completion, obj, allowed)
    for e in errs:
        fail(kind, n, e)
    for c in obj["choices"]:
        if c["logprobs"] is not None:
            check_legacy(kind, n, c["text"], c["logprobs"])
    u = obj.get("usage")
    if u and u["total_tokens"] != u["prompt_tokens"] + u["completion_tokens"]:
        fail(kind, n, "usage total_tokens is not the sum")


def check_chat(kind, n, obj):
    parsed, errs = validate(ChatCompletion, obj, lambda loc, o: False)
    for e in errs:
        fail(kind, n, e)
    if parsed is None:
        return
    for c in parsed.choices:
        if c.logprobs is not None:
            joined = b"".join(bytes(t.bytes) for t in c.logprobs.content)
            if joined.decode("utf-8", "replace") != c.message.content:
                fail(kind, n, "the tokens' bytes do not join into the message content")
            for t in c.logprobs.content:
                if "\ufffd" not in t.token and t.token.encode() != bytes(t.bytes):
                    fail(kind, n, f"token {t.token!r} and its bytes differ")


def check_batch(n, obj):
    kind = "batch"
    keys = {"id", "custom_id", "response", "error"}
    if set(obj) != keys:
        fail(kind, n, f"keys {sorted(obj)} are not {sorted(keys)}")
        return
    if not isinstance(obj["id"], str) or not isinstance(obj["custom_id"], str):
        fail(kind, n, "id and custom_id must be strings")
    r = obj["response"]
    if set(r) != {"status_code", "request_id", "body"} or not isinstance(r["status_code"], int):
        fail(kind, n, f"response {r} is not {{status_code, request_id, body}}")
        return
    body = r["body"]
    if r["status_code"] != 200:
        _, errs = validate(ErrorObject, body.get("error"), lambda loc, o: False)
        for e in errs:
            fail(kind, n, "error body: " + e)
        err = obj["error"]
        if not isinstance(err, dict) or set(err) != {"code", "message"}:
            fail(kind, n, f"error {err} is not {{code, message}}")
        if body["error"]["param"] is None:
            fail(kind, n, "a refused field is not named in param")
        return
    if obj["error"] is not None:
        fail(kind, n, "a 200 response with an error")
    if body.get("object") == "chat.completion":
        check_chat(kind, n, body)
    else:
        check_completion(kind, n, body)


def main():
    counts = {}
    for n, line in enumerate(sys.stdin, 1):
        kind, _, text = line.rstrip("\n").partition("\t")
        obj = json.loads(text)
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "completion":
            check_completion(kind, n, obj)
        elif kind == "completion_chunk":
            check_completion(kind, n, obj, chunk=True)
        elif kind == "chat":
            check_chat(kind, n, obj)
        elif kind == "chat_chunk":
            _, errs = validate(ChatCompletionChunk, obj, lambda loc, o: False)
            for e in errs:
                fail(kind, n, e)
        elif kind == "error":
            _, errs = validate(ErrorObject, obj["error"], lambda loc, o: False)
            for e in errs:
                fail(kind, n, e)
        elif kind == "batch":
            check_batch(n, obj)
        else:
            fail(kind, n, "unknown kind")
    want = {"completion", "completion_chunk", "chat", "chat_chunk", "error", "batch"}
    if set(counts) != want and "--any" not in sys.argv[1:]:
        failures.append(f"kinds seen {sorted(counts)}, want {sorted(want)}")
    for f in failures:
        print(f)
    print(f"checked {sum(counts.values())} objects: {counts}; {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
