#!/usr/bin/env python3
"""Train fg's shipped model: a small OPT on five of Jane Austen's novels (CPU only).

    pip install torch transformers tokenizers safetensors
    python3 models/austen-opt/train.py [--steps N] [--out models/austen-opt]

1. Trains a byte-level BPE (Hugging Face tokenizers, GPT-2's pre-tokenization) with 8192 tokens on
   the five training novels; ids 0..3 are OPT's <s>, <pad>, </s>, <unk>. Written as vocab.json +
   merges.txt + tokenizer_config.json + special_tokens_map.json, loadable by transformers'
   GPT2Tokenizer (which prepends </s> like OPT's tokenizer) and by fg's C tokenizer.
2. Trains OPTForCausalLM (pre-LN, ReLU, learned positions) on random 256-token windows of the
   five novels, each window starting with </s>, for a fixed number of steps (deterministic seed).
3. Saves the model with save_pretrained in float16 (model.safetensors) and evaluates the held-out
   perplexity of Persuasion with the float16 weights computed in float32, by the protocol that
   `fg-infer ppl` implements (see eval_ppl), writing eval.json.

Data: data/austen/*.txt (public domain; see data/austen/SOURCE.md). Persuasion is held out.
"""
import argparse
import json
import math
import os
import time

import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import GPT2Tokenizer, OPTConfig, OPTForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "data", "austen")
TRAIN = ["emma.txt", "mansfield_park.txt", "northanger_abbey.txt", "pride_and_prejudice.txt",
         "sense_and_sensibility.txt"]
HELDOUT = "persuasion.txt"
SPECIAL = ["<s>", "<pad>", "</s>", "<unk>"]
BOS = 2  # OPT starts every sequence with </s> (bos_token_id = eos_token_id = 2)


def read(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return f.read()


def train_tokenizer(out, vocab_size):
    tok = ByteLevelBPETokenizer(add_prefix_space=False)
    tok.train_from_iterator([read(n) for n in TRAIN], vocab_size=vocab_size, min_frequency=2,
                            special_tokens=SPECIAL, show_progress=False)
    tok.save_model(out)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "add_bos_token": True,
                   "add_prefix_space": False, "bos_token": "</s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "pad_token": "<pad>", "errors": "replace",
                   "model_max_length": 512}, f, indent=2)
    with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "</s>", "eos_token": "</s>", "unk_token": "<unk>",
                   "pad_token": "<pad>"}, f, indent=2)
    return GPT2Tokenizer.from_pretrained(out)


def encode(tok, text):
    """Token ids of text without the BOS that GPT2Tokenizer would prepend."""
    ids = tok(text, add_special_tokens=False)["input_ids"]
    return torch.tensor(ids, dtype=torch.long)


def eval_ppl(model, ids, window):
    """Perplexity protocol shared with `fg-infer ppl`: split the token ids (no BOS) into
    consecutive blocks of window-1 tokens (the last may be shorter); feed each block as
    [BOS] + block; every block token is predicted from BOS and the tokens before it in its block.
    ppl = exp(sum of negative log-likelihoods / number of predicted tokens), in float64."""
    nll, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for start in range(0, len(ids), window - 1):
            block = ids[start:start + window - 1]
            x = torch.cat([torch.tensor([BOS]), block]).unsqueeze(0)
            logits = model(input_ids=x).logits[0, :-1].double()
            logp = torch.log_softmax(logits, dim=-1)
            nll -= logp.gather(1, block.unsqueeze(1)).sum().item()
            count += len(block)
    return math.exp(nll / count), count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "austen-opt"))
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)

    tok = train_tokenizer(args.out, args.vocab)
    train_ids = torch.cat([torch.cat([torch.tensor([BOS]), encode(tok, read(n))]) for n in TRAIN])
    held_ids = encode(tok, read(HELDOUT))
    print(f"tokens: train {len(train_ids)}, held-out {len(held_ids)}", flush=True)

    cfg = OPTConfig(vocab_size=len(tok), hidden_size=256, num_hidden_layers=4, ffn_dim=1024,
                    num_attention_heads=4, max_position_embeddings=512, word_embed_proj_dim=256,
                    do_layer_norm_before=True, activation_function="relu", dropout=0.1,
                    attention_dropout=0.0, pad_token_id=1, bos_token_id=BOS, eos_token_id=BOS,
                    enable_bias=True, tie_word_embeddings=True)
    model = OPTForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.1)
    warm = 100

    def lr_at(step):
        if step < warm:
            return (step + 1) / warm
        p = (step - warm) / max(1, args.steps - warm)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    g = torch.Generator().manual_seed(1)
    t0 = time.time()
    model.train()
    for step in range(args.steps):
        starts = torch.randint(0, len(train_ids) - args.seq, (args.batch,), generator=g)
        x = torch.stack([torch.cat([torch.tensor([BOS]), train_ids[s:s + args.seq - 1]])
                         for s in starts.tolist()])
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == args.steps - 1:
            el = time.time() - t0
            print(f"step {step} loss {loss.item():.3f} {el:.0f}s "
                  f"eta {el / (step + 1) * (args.steps - step - 1):.0f}s", flush=True)

    model.config.dropout = 0.0
    model = model.half()
    model.config.dtype = torch.float16
    model.save_pretrained(args.out)
    model = OPTForCausalLM.from_pretrained(args.out, dtype=torch.float32)
    ppl, n = eval_ppl(model, held_ids, 512)
    ex_ids = held_ids[:1000]
    ex_ppl = {w: eval_ppl(model, ex_ids, w)[0] for w in (64, 512)}
    result = {"heldout": HELDOUT, "heldout_tokens": n, "window": 512, "ppl_f16_weights": ppl,
              "excerpt_tokens": len(ex_ids), "excerpt_ppl": ex_ppl,
              "steps": args.steps, "batch": args.batch, "seq": args.seq,
              "train_tokens": len(train_ids), "train_seconds": round(time.time() - t0),
              "params": sum(p.numel() for p in model.parameters())}
    with open(os.path.join(args.out, "eval.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
