#!/usr/bin/env bash
# fg-convert FILE.gguf + fg-infer through the tools, on gguf-py's files (tests/fixtures/gguf):
# the fixture prompt run as a job gives transformers' greedy tokens (F16, BF16, split Q4_0 as its
# whole file; Qwen3-MoE, Gemma 3, DeepSeek-V3 (attn_k_b / attn_v_b), V2-Lite, GLM-4 MoE and
# gpt-oss (fused gate_up experts; MXFP4 experts) too), a qwen file converted with its own tokenizer (no
# --tokenizer) gives the same tokens and tokenizer.json's prompt ids on a text set, fg-inspect
# shows the family, and what is refused is refused in one line, nothing left behind; an FP8
# block-scaled directory converts to BF16, a broken one is refused in one line.
# usage: tool_gguf.sh FG-CONVERT FG-INFER FG-INSPECT FIXTURES WORKDIR
set -euo pipefail
CONVERT=$1 INFER=$2 INSPECT=$3 FIX=$4 WORK=$5
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
fail() { echo "tool_gguf: $*" >&2; exit 1; }
tokens() { # store prompt-text -> the job's tokens, comma-separated
  printf '{"id": "p", "prompt": "%s", "max_new_tokens": 20}\n' "$2" > in.jsonl
  rm -f out.jsonl
  "$INFER" -m "$1" --input in.jsonl --output out.jsonl --quiet --threads 1 || fail "$1: the job failed"
  sed -n 's/.*"tokens": *\[\([0-9, ]*\)\].*/\1/p' out.jsonl | tr -d ' '
}
for m in llama2-tiny-f16:llama2-tiny-f32:llama2-tiny:llama llama2-tiny-bf16:llama2-tiny-bf16:llama2-tiny:llama \
         qwen3-tiny-bf16:qwen3-tiny-bf16:qwen3-tiny:qwen3 qwen2-tiny-bf16:qwen2-tiny-bf16:qwen2-tiny:qwen2 \
         qwen3-moe-tiny-bf16:qwen3-moe-tiny-bf16:qwen3-moe-tiny:qwen3_moe \
         gemma3-tiny-bf16:gemma3-tiny-bf16:gemma3-tiny:gemma3_text \
         deepseek-v3-tiny-split-bf16:deepseek-v3-tiny-bf16:deepseek-v3-tiny:deepseek_v3 \
         deepseek-v2-lite-tiny-bf16:deepseek-v2-lite-tiny-bf16:deepseek-v2-lite-tiny:deepseek_v2 \
         glm4-moe-tiny-bf16:glm4-moe-tiny-bf16:glm4-moe-tiny:glm4_moe \
         gpt-oss-tiny-fused-bf16:gpt-oss-tiny-bf16:gpt-oss-tiny:gpt_oss \
         gpt-oss-mxfp4-tiny:gpt-oss-mxfp4-tiny:gpt-oss-mxfp4-tiny:gpt_oss; do
  IFS=: read -r file tok ref family <<< "$m"
  "$CONVERT" "$FIX/gguf/$file.gguf" -o "$file.store" --tokenizer "$FIX/llama/$tok" --quiet ||
    fail "$file: convert"
  text=$(sed -n 's/^prompt_text //p' "$FIX/llama/$ref.ref/meta.txt")
  want=$(sed -n 's/^output: //p' "$FIX/llama/$ref.ref/greedy.txt" | tr -s ' ' ',')
  got=$(tokens "$file.store" "$text")
  [ "$got" = "$want" ] || fail "$file: tokens $got, transformers $want"
  info=$("$INSPECT" "$file.store") || fail "$file: fg-inspect failed"
  grep -q "^model $family:" <<< "$info" || fail "$file: fg-inspect does not show $family"
  echo "$file.gguf: greedy tokens equal transformers'"
  case $family in qwen2|qwen3) ;; *) continue ;; esac
  # its own tokenizer (tokenizer.ggml.*, no --tokenizer): the same greedy tokens, and the same
  # prompt ids as the tokenizer.json on a text set (the qwen2 tokenizer fixture's, as JSON)
  "$CONVERT" "$FIX/gguf/$file.gguf" -o "$file.own.store" --quiet || fail "$file: convert (own tokenizer)"
  got=$(tokens "$file.own.store" "$text")
  [ "$got" = "$want" ] || fail "$file (own tokenizer): tokens $got, transformers $want"
  LC_ALL=C.UTF-8 grep -m 300 -ax '[^[:cntrl:]]\{1,100\}' "$FIX/tokjson/qwen2/cases.txt" |
    sed 's/\\/\\\\/g; s/"/\\"/g' |
    awk '{ printf "{\"id\": \"t%d\", \"prompt\": \"%s\", \"max_new_tokens\": 1}\n", NR, $0 }' > texts.jsonl
  for st in "$file.store" "$file.own.store"; do
    "$INFER" -m "$st" --input texts.jsonl --output "$st.ids.jsonl" --prompt-ids --quiet --threads 1 ||
      fail "$st: the text set job failed"
  done
  [ "$(grep -c prompt_ids "$file.store.ids.jsonl")" -ge 250 ] || fail "$file: no prompt ids"
  untimed() { sed 's/"timing":{[^}]*},//' "$1"; }
  [ "$(untimed "$file.store.ids.jsonl")" = "$(untimed "$file.own.store.ids.jsonl")" ] ||
    fail "$file: its own tokenizer's prompt ids differ from tokenizer.json's"
  echo "$file.gguf: its own tokenizer gives tokenizer.json's ids on $(wc -l < texts.jsonl) texts"
done
text=$(sed -n 's/^prompt_text //p' "$FIX/llama/llama2-tiny.ref/meta.txt")
for f in llama2-tiny-q4_0.gguf llama2-tiny-q4_0-split-00001-of-00003.gguf; do
  "$CONVERT" "$FIX/gguf/$f" -o "$f.store" --tokenizer "$FIX/llama/llama2-tiny-f32" --quiet ||
    fail "$f: convert"
done
[ "$(tokens llama2-tiny-q4_0.gguf.store "$text")" = \
  "$(tokens llama2-tiny-q4_0-split-00001-of-00003.gguf.store "$text")" ] ||
  fail "the split Q4_0 file does not generate what the whole one does"
# Q4_0 re-quantized outside the layout that keeps its blocks: a note names the flags; in that
# layout, or into Q8 (fewer bits lost on purpose is not asked about), none
q4=$FIX/gguf/llama2-tiny-q4_0.gguf tk=$FIX/llama/llama2-tiny-f32
out=$("$CONVERT" "$q4" -o rq.store --tokenizer "$tk" --compress-weight 2>&1) || fail "rq: convert: $out"
[[ "$out" == *"note: 16 tensors' Q4_0/Q8_0 blocks were re-quantized"*"--group-size 32 --group-axis 1 keeps"* ]] ||
  fail "no note for Q4_0 re-quantized into g64: $out"
out=$("$CONVERT" "$q4" -o ll.store --tokenizer "$tk" --compress-weight --group-size 32 --group-axis 1 2>&1) ||
  fail "ll: convert: $out"
[[ "$out" != *"note:"* ]] || fail "a note for the lossless layout: $out"
out=$("$CONVERT" "$q4" -o q8.store --tokenizer "$tk" --weight-bits 8 2>&1) || fail "q8: convert: $out"
[[ "$out" != *"note:"* ]] || fail "a note for Q4_0 stored 8-bit: $out"
echo "Q4_0 re-quantized: noted, with the lossless layout's flags"
printf 'GGUF\003\000\000\000' > short.gguf && cp short.gguf renamed.bin
for c in "$FIX/gguf/llama2-tiny-f16.gguf:llama2-tiny-f16.gguf: no tokenizer.ggml.model: name the directory of the model's tokenizer.json with --tokenizer DIR" \
         "short.gguf:short.gguf: the GGUF tensor count at byte 8 runs past the end of the file" \
         "renamed.bin:renamed.bin: the GGUF tensor count at byte 8" \
         "$FIX/gguf/llama2-tiny-q4_0-split-00002-of-00003.gguf:part 2 of 3 of a split GGUF file: name its first part (-00001-of-00003.gguf)" \
         "$FIX/fp8/bad-noscale:F8_E4M3 tensor w has no w_scale_inv (its block scales)" \
         "$FIX/fp8/bad-scaleshape:tensor w_scale_inv must be F32 or BF16 [2, 2]"; do
  src=${c%%:*} want=${c#*:}
  set +e; err=$("$CONVERT" "$src" -o out_bad 2>&1); rc=$?; set -e
  [ $rc -eq 1 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] && [[ "$err" == *"$want"* ]] &&
    [ ! -e out_bad ] || fail "$src: rc=$rc: $err (want '$want')"
done
echo "refused in one line each, nothing left behind"
# an FP8 block-scaled checkpoint through the tool: stored BF16, the family shown
"$CONVERT" "$FIX/fp8/qwen3-tiny-fp8" -o fp8.store --tokenizer "$FIX/llama/qwen3-tiny-bf16" --quiet ||
  fail "qwen3-tiny-fp8: convert"
# (the output captured first: grep -q leaves a pipe early, and fg-inspect's SIGPIPE would fail
# the pipeline under pipefail)
info=$("$INSPECT" fp8.store) || fail "qwen3-tiny-fp8: fg-inspect failed"
grep -q "^model qwen3:" <<< "$info" || fail "qwen3-tiny-fp8: fg-inspect does not show qwen3"
grep -q "q_proj.weight  *bf16" <<< "$info" || fail "qwen3-tiny-fp8: q_proj not stored BF16"
echo "qwen3-tiny-fp8: converted, stored BF16"
