#!/usr/bin/env python3
"""bench/peers.py - the Python half of bench/peers.sh (run inside the venv peers.sh makes).

  peers.py make DIR --tokenizer TOKDIR --text FILE --prompts N --prompt-len P [shape flags]
      a random-weight OPT saved by transformers (F16-representable values, saved as float16, so
      fg's F16 store and every f32 path see the same numbers), its tokenizer (GPT-2 BPE laid out
      as OPT's: <s> <pad> </s> <unk> first, placeholders up to the model's vocabulary), DIR/prompts.jsonl (fg-infer's
      --input: N text prompts) and DIR/prompt_ids.json (the same prompts as token ids, BOS first:
      exactly P ids each, checked by re-encoding the text).
  peers.py make-llama DIR --tokenizer TOKDIR [--hidden H --layers L --heads A --kv-heads KV --ffn F]
      a random-weight Llama (default TinyLlama-1.1B's shape: 2048, 22 layers, 32 heads, 4 kv heads,
      ffn 5632; vocabulary GPT-2's 50257, the tokenizer TOKDIR's as it is, so llama.cpp's
      convert_hf_to_gguf.py knows its pre-tokenizer), F16-representable, saved as float16: the
      model of llama.cpp's column in peers.sh (GGUFs from it, fg's store from the same files).
  peers.py gguf SCRIPT ARGS...
      runs llama.cpp's convert_hf_to_gguf.py (SCRIPT) with ARGS; on a torch older than its dtype
      tables (Debian's 1.13 has no float8 or uint16/32/64), those names are bound first to a
      sentinel dtype (torch.complex32) that no tensor of the random-weight checkpoints has.
  peers.py hf DIR --gen G --batch B --threads T --out FILE
      transformers float32, greedy, B prompts per generate() call.
  peers.py ct2 DIR --ct2-dir CDIR --compute float32|int8 --gen G --batch B --threads T --out FILE
      CTranslate2 (the model converted once into CDIR), greedy, max_batch_size B; its prefill is
      timed too, up to the first token of each batch (generate_batch's per-token callback).
Each run writes {"tokens": [[ids] per prompt], "seconds": wall time of generation only,
"new_tokens": count, "prefill_seconds": the prefill's share or null} to --out (model loading and
conversion are not timed).
"""
import argparse
import json
import os
import sys
import time


def make(a):
    import torch
    from transformers import AutoTokenizer, OPTConfig, OPTForCausalLM

    os.makedirs(a.dir, exist_ok=True)
    gpt2 = json.load(open(os.path.join(a.tokenizer, "vocab.json"), encoding="utf-8"))
    # OPT's layout: fairseq's specials first, then the BPE tokens, placeholders up to --vocab
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for t, _ in sorted(gpt2.items(), key=lambda kv: kv[1]):
        if t != "<|endoftext|>":
            vocab[t] = len(vocab)
    n = a.vocab
    if n < len(vocab):
        sys.exit(f"peers.py: --vocab {n} is smaller than the tokenizer's {len(vocab)}")
    for i in range(n - len(vocab)):
        vocab[f"madeupword{i:04d}"] = len(vocab)
    json.dump(vocab, open(os.path.join(a.dir, "vocab.json"), "w", encoding="utf-8"),
              ensure_ascii=False)
    with open(os.path.join(a.tokenizer, "merges.txt"), encoding="utf-8") as f:
        merges = f.read()
    with open(os.path.join(a.dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write(merges)
    special = {"bos_token": "</s>", "eos_token": "</s>", "unk_token": "<unk>",
               "pad_token": "<pad>"}
    json.dump(dict(tokenizer_class="GPT2Tokenizer", add_bos_token=True, add_prefix_space=False,
                   errors="replace", model_max_length=a.max_pos, **special),
              open(os.path.join(a.dir, "tokenizer_config.json"), "w"), indent=2)
    json.dump(special, open(os.path.join(a.dir, "special_tokens_map.json"), "w"), indent=2)
    tok = AutoTokenizer.from_pretrained(a.dir)
    cfg = OPTConfig(vocab_size=n, hidden_size=a.hidden, num_hidden_layers=a.layers,
                    num_attention_heads=a.heads, ffn_dim=a.ffn, max_position_embeddings=a.max_pos,
                    word_embed_proj_dim=a.hidden, do_layer_norm_before=True,
                    activation_function="relu", bos_token_id=2, eos_token_id=2, pad_token_id=1)
    torch.manual_seed(a.seed)
    model = OPTForCausalLM(cfg).eval()
    with torch.no_grad():  # LayerNorm weights 1 and biases 0 at init: perturb them too
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.02)
    model = model.half()
    model.save_pretrained(a.dir, safe_serialization=True)


def make_llama(a):
    import shutil
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    os.makedirs(a.dir, exist_ok=True)
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(a.tokenizer, f), os.path.join(a.dir, f))
    n = len(json.load(open(os.path.join(a.tokenizer, "vocab.json"), encoding="utf-8")))
    special = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
               "unk_token": "<|endoftext|>"}
    json.dump(dict(tokenizer_class="GPT2Tokenizer", add_prefix_space=False, errors="replace",
                   model_max_length=a.max_pos, **special),
              open(os.path.join(a.dir, "tokenizer_config.json"), "w"), indent=2)
    json.dump(special, open(os.path.join(a.dir, "special_tokens_map.json"), "w"), indent=2)
    cfg = LlamaConfig(vocab_size=n, hidden_size=a.hidden, intermediate_size=a.ffn,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads,
                      num_key_value_heads=a.kv_heads, max_position_embeddings=a.max_pos,
                      rms_norm_eps=1e-5, bos_token_id=n - 1, eos_token_id=n - 1,
                      tie_word_embeddings=False)
    torch.manual_seed(a.seed)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # RMSNorm weights are 1 at init: perturb them
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.02)
    model.half().save_pretrained(a.dir, safe_serialization=True)


def prompts(a):
    """N prompts of exactly P ids (BOS + P - 1 text tokens), cut from the text at word starts;
    a cut whose decoded text does not re-encode to the same ids is skipped."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(a.dir)
    words = open(a.text, encoding="utf-8").read().split()
    out, ids_all, w = [], [], 1000
    while len(out) < a.prompts:
        if w + 4 * a.prompt_len >= len(words):
            sys.exit("peers.py: the text is too short for the prompts asked for")
        enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]
        ids = enc(" ".join(words[w:w + 4 * a.prompt_len]))[:a.prompt_len - 1]
        text = tok.decode(ids)
        w += 4 * a.prompt_len
        if enc(text) != ids or len(ids) != a.prompt_len - 1:
            continue
        out.append({"id": f"p{len(out)}", "prompt": text})
        ids_all.append([2] + ids)
    with open(os.path.join(a.dir, f"prompts-{a.tag}.jsonl"), "w", encoding="utf-8") as f:
        for o in out:
            f.write(json.dumps(o, ensure_ascii=False) + "\n")
    json.dump(ids_all, open(os.path.join(a.dir, f"prompt_ids-{a.tag}.json"), "w"))


def save(a, tokens, seconds, prefill=None):
    json.dump({"tokens": tokens, "seconds": seconds, "new_tokens": sum(map(len, tokens)),
               "prefill_seconds": prefill}, open(a.out, "w"))
    split = f" (prefill {prefill:.2f} s, decode {seconds - prefill:.2f} s)" if prefill else ""
    print(f"{sum(map(len, tokens))} tokens in {seconds:.2f} s{split}: "
          f"{sum(map(len, tokens)) / seconds:.2f} tok/s")


def cut_eos(seq):
    return seq[:seq.index(2) + 1] if 2 in seq else seq


def hf(a):
    import torch
    from transformers import OPTForCausalLM

    torch.set_num_threads(a.threads)
    ids = json.load(open(os.path.join(a.dir, f"prompt_ids-{a.tag}.json")))
    model = OPTForCausalLM.from_pretrained(a.dir, torch_dtype=torch.float32).eval()
    tokens, t = [], 0.0
    with torch.no_grad():
        for i in range(0, len(ids), a.batch):
            x = torch.tensor(ids[i:i + a.batch])  # equal lengths: no padding
            t0 = time.perf_counter()
            y = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=a.gen,
                               do_sample=False, pad_token_id=1, eos_token_id=2)
            t += time.perf_counter() - t0
            tokens += [cut_eos(r[x.shape[1]:].tolist()) for r in y]
    save(a, tokens, t)


def ct2conv(a):
    """The checkpoint as a CTranslate2 float32 model in --ct2-dir, once (int8 quantizes at load)."""
    if not os.path.exists(os.path.join(a.ct2_dir, "model.bin")):
        import transformers
        from ctranslate2.converters import TransformersConverter

        class Converter(TransformersConverter):
            """CTranslate2 4.6+ passes from_pretrained(dtype=...), which transformers before 4.56
            (the last to run on an old torch such as Debian's) calls torch_dtype."""
            def load_model(self, model_class, path, **kw):
                if "dtype" in kw and tuple(map(int, transformers.__version__.split(".")[:2])) < (4, 56):
                    kw["torch_dtype"] = kw.pop("dtype")
                return super().load_model(model_class, path, **kw)
        Converter(a.dir, load_as_float16=False).convert(a.ct2_dir, quantization="float32")


def ct2(a):
    import ctranslate2

    ct2conv(a)
    ids = json.load(open(os.path.join(a.dir, f"prompt_ids-{a.tag}.json")))
    gen = ctranslate2.Generator(a.ct2_dir, device="cpu", compute_type=a.compute,
                                intra_threads=a.threads, inter_threads=1)
    vocab = json.load(open(os.path.join(a.dir, "vocab.json"), encoding="utf-8"))
    inv = {v: k for k, v in vocab.items()}
    toks = [[inv[i] for i in p] for p in ids]
    tokens, t, pre = [], 0.0, 0.0
    for i in range(0, len(toks), a.batch):
        first = []  # when the batch's first token came out: the end of its prefill

        def step(r):
            if not first:
                first.append(time.perf_counter())
            return False
        t0 = time.perf_counter()
        res = gen.generate_batch(toks[i:i + a.batch], max_length=a.gen, sampling_topk=1,
                                 beam_size=1, include_prompt_in_result=False,
                                 max_batch_size=a.batch, callback=step)
        t += time.perf_counter() - t0
        pre += first[0] - t0 if first else 0.0
        tokens += [cut_eos(list(r.sequences_ids[0])) for r in res]
    save(a, tokens, t, pre)


def fg_tokens(path):
    """Tokens of an fg-infer --output JSONL, in prompt order (ids p0, p1, ...)."""
    rows = [json.loads(line) for line in open(path, encoding="utf-8")]
    rows.sort(key=lambda r: int(r["id"][1:]))
    return [r["tokens"] for r in rows]


def report(a):
    """--out (default DIR/results.tsv: scenario, system, round, tok/s, tokens file, fg?) as one table per
    scenario: tok/s per round, the mean, fg's ratios to CTranslate2, and whether the f32 paths
    (fg F16 store, transformers, CTranslate2 float32) produced the same tokens."""
    rows = [l.rstrip("\n").split("\t") for l in open(a.out or os.path.join(a.dir, "results.tsv"))]
    rows = [r for r in rows if len(r) == 6]
    for sc in dict.fromkeys(r[0] for r in rows):
        sub = [r for r in rows if r[0] == sc]
        systems = list(dict.fromkeys(r[1] for r in sub))
        rounds = max(int(r[2]) for r in sub)
        print(f"\n{sc}: tok/s per round (generation only; fg: its summary line)")
        print("| system | " + " | ".join(f"round {i}" for i in range(1, rounds + 1)) +
              " | mean |")
        print("|---|" + "---:|" * (rounds + 1))
        mean = {}
        for s_ in systems:
            v = {int(r[2]): float(r[3]) for r in sub if r[1] == s_}
            ok = [x for x in v.values() if x > 0]
            mean[s_] = sum(ok) / len(ok) if ok else 0.0
            cells = [f"{v[i]:.2f}" if v.get(i, 0) > 0 else "-" for i in range(1, rounds + 1)]
            print(f"| {s_} | " + " | ".join(cells) + f" | {mean[s_]:.2f} |")
        for fg_s in [s_ for s_ in systems if s_.startswith("fg")]:
            peer = "ct2-float32" if "F16" in fg_s or "f32" in fg_s else "ct2-int8"
            if mean.get(peer, 0) > 0:
                print(f"  {fg_s} / {peer}: {mean[fg_s] / mean[peer]:.2f}")
        toks = {}
        for r in sub:
            if r[2] == "1" and os.path.exists(r[4]):
                toks[r[1]] = fg_tokens(r[4]) if r[5] == "fg" else json.load(open(r[4]))["tokens"]
        exact = [s_ for s_ in systems if s_ in toks and "bf16" not in s_ and
                 ("f32" in s_ or "F16" in s_ or "float32" in s_)]
        if len(exact) > 1:
            ref = toks[exact[0]]
            for s_ in exact[1:]:
                same = sum(x == y for x, y in zip(ref, toks[s_]))
                print(f"  tokens {s_} vs {exact[0]}: {same}/{len(ref)} sequences identical")
        for s_ in [s_ for s_ in toks if s_ not in exact and exact]:
            ref = toks[exact[0]]
            agree = sum(x == y for p, q in zip(ref, toks[s_]) for x, y in zip(p, q))
            print(f"  tokens {s_} vs {exact[0]}: {agree}/{sum(map(len, ref))} positions agree")


def gguf_convert(argv):
    import runpy
    import torch

    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "uint16", "uint32", "uint64"):
        if not hasattr(torch, name):
            setattr(torch, name, torch.complex32)
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    runpy.run_path(argv[0], run_name="__main__")


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "gguf":
        return gguf_convert(sys.argv[2:])
    p = argparse.ArgumentParser()
    p.add_argument("cmd", choices=["make", "make-llama", "prompts", "hf", "ct2", "ct2conv", "report"])
    p.add_argument("dir")
    p.add_argument("--tokenizer")
    p.add_argument("--text")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--vocab", type=int, default=50272)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--ffn", type=int, default=8192)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--max-pos", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gen", type=int, default=32)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--compute", default="float32")
    p.add_argument("--ct2-dir")
    p.add_argument("--out")
    p.add_argument("--tag", default="b32")
    a = p.parse_args()
    {"make": make, "make-llama": make_llama, "prompts": prompts, "hf": hf, "ct2": ct2, "ct2conv": ct2conv,
     "report": report}[a.cmd](a)


if __name__ == "__main__":
    main()
