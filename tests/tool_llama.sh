#!/usr/bin/env bash
# fg-convert + fg-infer end to end on the Llama-family fixtures (tests/fixtures/llama), through
# the tools: the checkpoint with its tokenizer.json converted, the fixture's prompt text run as a
# JSONL job (tokenized by the stored tokenizer.json) must give transformers' greedy tokens; -p
# prints; ppl is finite; fg-inspect shows the family.
# usage: tool_llama.sh FG-CONVERT FG-INFER FG-INSPECT FIXTURES WORKDIR
set -euo pipefail
CONVERT=$1 INFER=$2 INSPECT=$3 FIX=$4 WORK=$5
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
fail() { echo "tool_llama: $*" >&2; exit 1; }
for m in llama2-tiny-bf16:llama2-tiny:llama llama3-tiny-bf16:llama3-tiny:llama \
         mistral-tiny-bf16:mistral-tiny:mistral qwen2-tiny-bf16:qwen2-tiny:qwen2 \
         qwen3-tiny-hf5:qwen3-tiny:qwen3 qwen3-yarn-tiny-bf16:qwen3-yarn-tiny:qwen3 \
         ministral-tiny-bf16:ministral-tiny:ministral phi3-tiny-hf5:phi3-tiny:phi3 \
         phi3-longrope-tiny-bf16:phi3-longrope-tiny:phi3 \
         phi3-longrope-short-tiny-bf16:phi3-longrope-short-tiny:phi3 \
         gemma3-tiny-hf5:gemma3-tiny:gemma3_text gemma3-mm-tiny-hub:gemma3-tiny:gemma3 \
         mistral3-mm-tiny-hf5:mistral-tiny:mistral3 ministral3-tiny-hf5:ministral3-tiny:ministral3 \
         qwen2.5-vl-tiny-hub:qwen2-tiny:qwen2_5_vl qwen3-vl-tiny-hf5:qwen3-tiny:qwen3_vl \
         granite-tiny-hf5:granite-tiny:granite smollm3-tiny-hf5:smollm3-tiny:smollm3 \
         olmo2-tiny-hf5:olmo2-tiny:olmo2 mixtral-tiny-hf5:mixtral-tiny:mixtral \
         qwen3-moe-tiny-bf16:qwen3-moe-tiny:qwen3_moe \
         qwen2-moe-tiny-hf5:qwen2-moe-tiny:qwen2_moe olmoe-tiny-hf5:olmoe-tiny:olmoe \
         gemma2-tiny-bf16:gemma2-tiny:gemma2 granitemoe-tiny-hf5:granitemoe-tiny:granitemoe \
         mixtral-tiny-hf5-raw:mixtral-tiny:mixtral gpt-oss-tiny-bf16:gpt-oss-tiny:gpt_oss \
         gpt-oss-mxfp4-tiny:gpt-oss-mxfp4-tiny:gpt_oss gemma-tiny-hf5:gemma-tiny:gemma \
         glm4-moe-tiny-bf16:glm4-moe-tiny:glm4_moe minimax-m2-tiny-bf16:minimax-m2-tiny:minimax_m2 \
         olmo3-tiny-hf5:olmo3-tiny:olmo3 dots1-tiny-bf16:dots1-tiny:dots1 \
         seed-oss-tiny-hf5:seed-oss-tiny:seed_oss exaone4-tiny-bf16:exaone4-tiny:exaone4 \
         ernie4_5-tiny-bf16:ernie4_5-tiny:ernie4_5 ernie4_5-moe-tiny-hf5:ernie4_5-moe-tiny:ernie4_5_moe \
         glm4-tiny-bf16:glm4-tiny:glm4; do
  IFS=: read -r dir ref family <<< "$m"
  "$CONVERT" "$FIX/$dir" -o "$dir.store" --quiet || fail "$dir: convert"
  text=$(sed -n 's/^prompt_text //p' "$FIX/$ref.ref/meta.txt")
  want=$(sed -n 's/^output: //p' "$FIX/$ref.ref/greedy.txt" | tr -s ' ' ',')
  case "$text" in *[\"\\]*) fail "$ref: prompt_text needs JSON escaping";; esac
  printf '{"id": "p", "prompt": "%s", "max_new_tokens": 20}\n' "$text" > in.jsonl
  rm -f out.jsonl
  "$INFER" -m "$dir.store" --input in.jsonl --output out.jsonl --quiet --threads 1 ||
    fail "$dir: the job failed"
  got=$(sed -n 's/.*"tokens": *\[\([0-9, ]*\)\].*/\1/p' out.jsonl | tr -d ' ')
  [ "$got" = "$want" ] || fail "$dir: tokens $got, transformers $want"
  "$INFER" -m "$dir.store" -p "$text" --max-new-tokens 4 --quiet > p.txt || fail "$dir: -p"
  grep -q "Darcy" p.txt || fail "$dir: -p printed $(cat p.txt)"
  printf 'It is a truth universally acknowledged, said Mr. Darcy, that Elizabeth %.0s' \
    $(seq 20) > t.txt
  ppl=$("$INFER" ppl -m "$dir.store" --text t.txt --window 64 --quiet) || fail "$dir: ppl"
  grep -Eq '^perplexity [0-9]+\.[0-9]+ over' <<< "$ppl" || fail "$dir: ppl printed $ppl"
  info=$("$INSPECT" "$dir.store") || fail "$dir: fg-inspect failed"
  grep -q "^model $family:" <<< "$info" || fail "$dir: fg-inspect does not show $family"
  echo "$dir: greedy tokens equal transformers'; $ppl"
done
info=$("$INSPECT" qwen3-yarn-tiny-bf16.store) || fail "fg-inspect on the yarn store failed"
grep -q '^model qwen3: .* x 32 with q/k norms, .*(rotary, yarn scaling)' <<< "$info" ||
  fail "fg-inspect does not show Qwen3's q/k norms and YaRN: $(grep '^model' <<< "$info")"
"$CONVERT" "$FIX/qwen2-window-tiny-hf5" -o window.store --quiet || fail "window: convert"
info=$("$INSPECT" window.store) || fail "fg-inspect on the window store failed"
grep -q '^model qwen2: .*, sliding window 5 on 1 of 2 layers' <<< "$info" ||
  fail "fg-inspect does not show the per-layer window: $(grep '^model' <<< "$info")"
info=$("$INSPECT" phi3-longrope-tiny-bf16.store) || fail "fg-inspect on the longrope store failed"
grep -q '^model phi3: .*(rotary on 12 of 16 dims, longrope scaling), tied head' <<< "$info" ||
  fail "fg-inspect does not show Phi-3's partial rotary and LongRoPE: $(grep '^model' <<< "$info")"
info=$("$INSPECT" gemma3-tiny-hf5.store) || fail "fg-inspect on the Gemma 3 store failed"
grep -q '^model gemma3_text: .*(rotary, linear scaling; sliding layers: base 10000, no scaling)' \
  <<< "$info" || fail "fg-inspect does not show Gemma 3's two rotary settings: $(grep '^model' <<< "$info")"
info=$("$INSPECT" qwen2-moe-tiny-hf5.store) || fail "fg-inspect on the Qwen2-MoE store failed"
grep -q '^model qwen2_moe: .*, 6 experts (top 2) of 32 + a shared one on 2 of 2 layers' \
  <<< "$info" || fail "fg-inspect does not show the experts: $(grep '^model' <<< "$info")"
info=$("$INSPECT" gemma2-tiny-bf16.store) || fail "fg-inspect on the Gemma 2 store failed"
want='^model gemma2: .*sliding window 5 on 1 of 2 layers, .*soft-capped: scores 2, logits 6'
grep -q "$want" <<< "$info" || fail "fg-inspect does not show Gemma 2's caps: $(grep '^model' <<< "$info")"
info=$("$INSPECT" gpt-oss-tiny-bf16.store) || fail "fg-inspect on the gpt-oss store failed"
want='^model gpt_oss: .*4 experts (top 2, renormalized) of 24, biased, clamped SwiGLU (limit 2, '
want+='alpha 1.702) on 2 of 2 layers, .*; attention sinks;'
grep -q "$want" <<< "$info" || fail "fg-inspect does not show gpt-oss's experts and sinks: $(grep '^model' <<< "$info")"
# GLM-4 MoE's multi-token prediction layer: skipped, and fg-convert says so
"$CONVERT" "$FIX/glm4-moe-tiny-bf16" -o mtp.store 2> mtp.txt || fail "glm4 mtp: convert"
grep -q '(6 tensors of the multi-token prediction layers skipped: fg runs the next-token model)' \
  mtp.txt || fail "fg-convert does not report the skipped prediction layer: $(cat mtp.txt)"
# a multimodal Gemma 3: the vision tower and projector are skipped, and fg-convert says so
"$CONVERT" "$FIX/gemma3-mm-tiny-hf5" -o mm.store 2> mm.txt || fail "gemma3 mm: convert"
grep -q '(34 tensors of the vision tower and projector skipped: fg runs the text model)' mm.txt ||
  fail "fg-convert does not report the skipped vision tensors: $(cat mm.txt)"
info=$("$INSPECT" --json qwen3-yarn-tiny-bf16.store) || fail "fg-inspect --json failed"
grep -q '"qk_norm": true, .*"rope_scaling": "yarn"' <<< "$info" ||
  fail "fg-inspect --json: $(grep '"model"' <<< "$info")"

# generation_config.json's eos_token_id is the stop set (as for transformers' generate(): Qwen2.5
# Instruct stops at <|im_end|> only by it): made the second greedy token, the job stops there
mkdir gen && cp "$FIX/llama3-tiny-bf16/"* gen/
want=$(sed -n 's/^output: //p' "$FIX/llama3-tiny.ref/greedy.txt" | awk '{print $1 "," $2}')
printf '{"eos_token_id": [7, %s], "do_sample": true}\n' "${want#*,}" > gen/generation_config.json
"$CONVERT" gen -o gen.store --quiet || fail "generation_config.json: convert"
text=$(sed -n 's/^prompt_text //p' "$FIX/llama3-tiny.ref/meta.txt")
printf '{"id": "p", "prompt": "%s", "max_new_tokens": 20}\n' "$text" > in.jsonl
rm -f out.jsonl
"$INFER" -m gen.store --input in.jsonl --output out.jsonl --quiet --threads 1 ||
  fail "generation_config.json: the job failed"
grep -q "\"tokens\":\[$want\],\"finish_reason\":\"eos\"" out.jsonl ||
  fail "generation_config.json's eos $want not honoured: $(cat out.jsonl)"
info=$("$INSPECT" gen.store) || fail "fg-inspect gen.store failed" # (no pipe: grep -q would
grep -q "; stops at 7 ${want#*,} (generation_config.json);" <<< "$info" ||  # cut fg-inspect off)
  fail "fg-inspect does not show generation_config.json's stop set: $(grep '^model' <<< "$info")"
printf '{"eos_token_id": "x"}\n' > gen/generation_config.json
if "$CONVERT" gen -o gen2.store --quiet 2> err.txt; then fail "a bad generation_config.json converted"; fi
grep -q 'generation_config.json: key eos_token_id' err.txt || fail "bad generation_config: $(cat err.txt)"
[ ! -e gen2.store ] || fail "a refused conversion left gen2.store"
echo "generation_config.json: eos_token_id honoured, a malformed one refused"

# rope_scaling "dynamic" (NTK): the default frequencies within max_position_embeddings, so
# llama2-tiny with it gives transformers' tokens; a context past them is refused
mkdir dyn && cp "$FIX/llama2-tiny-bf16/"* dyn/
sed -i 's/"rope_scaling": null/"rope_scaling": {"type": "dynamic", "factor": 2.0}/' dyn/config.json
grep -q '"dynamic"' dyn/config.json || fail "dynamic: config.json not edited"
"$CONVERT" dyn -o dyn.store --quiet || fail "dynamic: convert"
text=$(sed -n 's/^prompt_text //p' "$FIX/llama2-tiny.ref/meta.txt")
want=$(sed -n 's/^output: //p' "$FIX/llama2-tiny.ref/greedy.txt" | tr -s ' ' ',')
printf '{"id": "p", "prompt": "%s", "max_new_tokens": 20}\n' "$text" > in.jsonl
rm -f out.jsonl
"$INFER" -m dyn.store --input in.jsonl --output out.jsonl --quiet --threads 1 ||
  fail "dynamic: the job failed"
got=$(sed -n 's/.*"tokens": *\[\([0-9, ]*\)\].*/\1/p' out.jsonl | tr -d ' ')
[ "$got" = "$want" ] || fail "dynamic: tokens $got, transformers $want"
if "$INFER" -m dyn.store -p "$text" --max-new-tokens 2 --max-context 200 --quiet \
     > /dev/null 2> err.txt; then fail "dynamic: a context past the positions ran"; fi
grep -q "exceeds the model's 128 positions" err.txt || fail "dynamic: $(cat err.txt)"
echo "rope_scaling dynamic: transformers' tokens; a longer context refused"
