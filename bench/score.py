#!/usr/bin/env python3
"""fg-infer score vs transformers on four-choice items (issue 40 item 5), in one run.

The model: --model opt-1.3b (the default), an OPT-1.3b-shaped checkpoint with random weights
(transformers' OPTForCausalLM from OPTConfig: hidden 2048, 24 layers, FFN 8192, 32 heads,
vocabulary 50272; f16 safetensors; GPT-2's tokenizer files of data/gpt2-tokenizer), made once
in the work directory; or --model austen, the shipped models/austen-opt (4 layers, hidden 256,
its own tokenizer). Either is converted with fg-convert. ITEMS four-choice items are built from
the shipped Austen texts: the context is a sentence (at most 40 words), the choices the first
four words of the next sentence and of three other sentences; with --fewshot K, K examples
(other sentences, each followed by the first four words of its next sentence, separated by
blank lines, the same K before every item, as lm-eval's num_fewshot with its first_n sampler
builds them) come before each context. Every (context, choice) pair is
scored as lm-evaluation-harness's loglikelihood does (the continuation's summed log-prob and
whether it is greedy) by
  - fg-infer score (the pairs given as token ids, so both sides see the same tokens): the four
    pairs of an item share their context, which fg computes once (fg_engine_score); with
    --sharing also with --no-shared-context (each pair's context computed again), the same
    pairs, to show what sharing saves: pairs a second and the prefill rows computed (sequence x
    position, left padding included) of each, and the largest difference between the two runs;
  - transformers (f32 on the CPU, as lm-eval's HF model: batches of BATCH pairs sorted by
    length, one forward each, log_softmax gathered over the continuation); --no-hf skips it;
the figures printed: pairs and items a second, tokens a second (every token of the windows),
each side's process CPU time (fg-infer's from the kernel's accounting of the child, the
transformers loop's from time.process_time(): steady on a loaded machine, where the wall times
are not) and the two ratios, the largest difference of a pair's log-prob between the two, and
how many items choose the same answer.

usage: bench/score.py [--model opt-1.3b|austen] [--items 1000] [--fewshot 0] [--threads 2]
                      [--batch 32] [--sharing] [--no-hf] [--work DIR] [--bin BUILD]
(python with transformers, and torch unless --no-hf; fg-convert and fg-infer in --bin)
"""
import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_checkpoint(d):
    import torch
    from transformers import OPTConfig, OPTForCausalLM
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return
    os.makedirs(d, exist_ok=True)
    cfg = OPTConfig(vocab_size=50272, hidden_size=2048, num_hidden_layers=24, ffn_dim=8192,
                    num_attention_heads=32, max_position_embeddings=2048,
                    word_embed_proj_dim=2048, bos_token_id=2, eos_token_id=2, pad_token_id=1)
    torch.manual_seed(0)
    m = OPTForCausalLM(cfg).half()
    m.save_pretrained(d, safe_serialization=True)
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(ROOT, "data/gpt2-tokenizer", f), d)


def make_items(n, tok, fewshot=0):
    text = open(os.path.join(ROOT, "data/austen/pride_and_prejudice.txt"), encoding="utf-8").read()
    sents = [s.strip().replace("\n", " ") for s in re.split(r"(?<=[.!?])\s+", text)]
    sents = [s for s in sents if len(s.split()) >= 6]
    rnd = random.Random(40)
    items = []
    shots, srnd = [], random.Random(41)  # (the items are the same whatever K)
    for _ in range(fewshot):  # lm-eval: text, target delimiter, target; shots joined by "\n\n"
        k = srnd.randrange(len(sents) - 1)
        shots.append(" ".join(sents[k].split()[:40]) + " " + " ".join(sents[k + 1].split()[:4]))
    prefix = tok.encode("\n\n".join(shots) + "\n\n") if fewshot else []
    for i in range(n):
        k = rnd.randrange(len(sents) - 1)
        ctx = " ".join(sents[k].split()[:40])
        right = " " + " ".join(sents[k + 1].split()[:4])
        wrong = [" " + " ".join(rnd.choice(sents).split()[:4]) for _ in range(3)]
        choices = [right] + wrong
        c_ids = [2] + prefix + tok.encode(ctx)
        items.append([(c_ids, tok.encode(c)) for c in choices])
    return items


def run_fg(args, store, items, out_dir, share=True):
    pairs = os.path.join(out_dir, "pairs.jsonl")
    with open(pairs, "w") as f:
        for i, it in enumerate(items):
            for j, (c, k) in enumerate(it):
                f.write(json.dumps({"id": f"{i}.{j}", "context": c, "continuation": k}) + "\n")
    out = os.path.join(out_dir, "fg.out.jsonl")
    if os.path.exists(out):
        os.remove(out)
    cmd = [os.path.join(args.bin, "fg-infer"), "score", "-m", store, "--input", pairs,
           "--output", out, "--threads", str(args.threads)]
    if not share:
        cmd.append("--no-shared-context")
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    if p.returncode:
        sys.exit("fg-infer score failed: " + p.stderr)
    line = [l for l in p.stderr.splitlines() if l.startswith("fg-infer: scored")]
    res = {}
    for l in open(out):
        r = json.loads(l)
        res[r["id"]] = (r["logprob"], r["is_greedy"])
    m = re.search(r"in ([0-9.]+) s", line[-1]) if line else None
    rows = re.search(r"prefill rows ([0-9]+) computed, ([0-9]+) taken", line[-1]) if line else None
    return {"res": res, "s": float(m.group(1)) if m else wall, "wall": wall, "cpu": cpu,
            "line": line[-1] if line else "",
            "rows": (int(rows.group(1)), int(rows.group(2))) if rows else (0, 0)}


def run_hf(args, ckpt, items):
    import torch
    from transformers import OPTForCausalLM
    torch.set_num_threads(args.threads)
    model = OPTForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float32).eval()
    reqs = [(f"{i}.{j}", c, k) for i, it in enumerate(items) for j, (c, k) in enumerate(it)]
    reqs.sort(key=lambda r: -(len(r[1]) + len(r[2])))
    res = {}
    t0 = time.time()
    c0 = time.process_time()
    with torch.no_grad():
        for b in range(0, len(reqs), args.batch):
            batch = reqs[b:b + args.batch]
            inps = [(c + k)[:-1] for _, c, k in batch]
            L = max(len(x) for x in inps)
            ids = torch.tensor([x + [1] * (L - len(x)) for x in inps])
            mask = torch.tensor([[1] * len(x) + [0] * (L - len(x)) for x in inps])
            lp = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.double(), -1)
            for r, (rid, c, k) in enumerate(batch):
                pos = range(len(c) - 1, len(c) - 1 + len(k))
                tgt = torch.tensor(k)
                rows = lp[r, list(pos)]
                s = float(rows.gather(1, tgt[:, None]).sum())
                g = bool((rows.argmax(-1) == tgt).all())
                res[rid] = (s, g)
    return res, time.time() - t0, time.process_time() - c0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=("opt-1.3b", "austen"), default="opt-1.3b")
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--fewshot", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--sharing", action="store_true")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--work", default=os.path.join(ROOT, "build/bench-score"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    from transformers import GPT2TokenizerFast
    work = os.path.join(args.work, args.model)
    os.makedirs(work, exist_ok=True)
    store = os.path.join(work, "store")
    if args.model == "austen":
        ckpt = os.path.join(ROOT, "models/austen-opt")
        convert = [ckpt, "-o", store, "--quiet"]
        shape = "the shipped austen-opt"
    else:
        ckpt = os.path.join(work, "opt-1.3b-random")
        make_checkpoint(ckpt)
        convert = [ckpt, "-o", store, "--quiet", "--tokenizer",
                   os.path.join(ROOT, "data/gpt2-tokenizer")]
        shape = "OPT-1.3b shape, random weights"
    if not os.path.exists(store):
        subprocess.run([os.path.join(args.bin, "fg-convert")] + convert, check=True)
    tok = GPT2TokenizerFast(os.path.join(ckpt, "vocab.json"), os.path.join(ckpt, "merges.txt"))
    items = make_items(args.items, tok, args.fewshot)
    tokens = sum(len(c) + len(k) - 1 for it in items for c, k in it)
    n = len(items)
    runs = [("fg-infer score", run_fg(args, store, items, work))]
    if args.sharing:
        runs.append(("  (each context again)", run_fg(args, store, items, work, share=False)))
    shots = f", {args.fewshot}-shot" if args.fewshot else ""
    print(f"{n} four-choice items{shots} ({4 * n} pairs, {tokens} tokens through the model), "
          f"{shape}, {args.threads} threads")
    for name, r in runs:
        print(f"  {name:22s}: {r['s']:8.2f} s  {4 * n / r['s']:8.2f} pairs/s  "
              f"{n / r['s']:7.2f} items/s  {tokens / r['s']:8.1f} tokens/s  prefill rows "
              f"{r['rows'][0]} computed, {r['rows'][1]} from shared contexts  (whole command "
              f"with load: {r['wall']:.2f} s; process CPU {r['cpu']:.1f} s)")
    fg = runs[0][1]["res"]
    pick = lambda res, i: max(range(4), key=lambda j: res[f"{i}.{j}"][0])
    if args.sharing:
        other = runs[1][1]["res"]
        d = max(abs(fg[r][0] - other[r][0]) for r in fg)
        g = sum(fg[r][1] == other[r][1] for r in fg)
        print(f"  shared vs each context again: {runs[1][1]['s'] / runs[0][1]['s']:.2f}x the "
              f"pairs a second, {runs[1][1]['rows'][0] / max(1, runs[0][1]['rows'][0]):.2f}x "
              f"fewer prefill rows; largest |logprob difference| {d:.2e}, is_greedy equal on "
              f"{g}/{len(fg)}")
    if not args.no_hf:
        hf, hf_s, hf_cpu = run_hf(args, ckpt, items)
        print(f"  {'transformers':22s}: {hf_s:8.2f} s  {4 * n / hf_s:8.2f} pairs/s  "
              f"{n / hf_s:7.2f} items/s  {tokens / hf_s:8.1f} tokens/s  (f32, batch "
              f"{args.batch}, load not counted; process CPU {hf_cpu:.1f} s)")
        f = runs[0][1]
        print(f"  fg / transformers: {hf_s / f['s']:.2f}x the pairs a second (wall), "
              f"{hf_cpu / max(f['cpu'], 1e-9):.2f}x by process CPU time")
        diff = max(abs(fg[r][0] - hf[r][0]) for r in hf)
        greedy_same = sum(fg[r][1] == hf[r][1] for r in hf)
        same = sum(pick(fg, i) == pick(hf, i) for i in range(n))
        print(f"  largest |logprob difference| {diff:.2e}; same answer on {same}/{n} items; "
              f"is_greedy equal on {greedy_same}/{4 * n} pairs")
    for name, r in runs:
        print(f"  ({r['line']})")


main()
