#!/usr/bin/env bash
# Published configs and tokenizers through the tools (issue 38): for each model of
# tests/fixtures/real-tiny (make_real_fixtures.py: a published config.json shrunk, random bf16
# weights) with the published generation config and tokenizer files of tests/fixtures/real/<dir>,
# the checkpoint directory is assembled as the hub has it (.xz files decompressed), and
#   1. fg-convert imports it (the vocabulary as published: Qwen's 151,936 embedding rows for
#      151,665 tokens, phi-4's 100,352 for its 100,3xx),
#   2. fg-tokenize encodes the prompt text (a chat model's template rendering, special tokens in
#      it) to the ids transformers' tokenizer(text) gave,
#   3. the engine's greedy tokens from those ids are transformers' (dump_logits),
#   4. fg-infer runs the prompt text as a JSONL job and returns the same prompt ids and tokens,
#      and encodes a text whose ids depend on the tokenizer class (config.json's model_type) as
#      fg-tokenize does on the checkpoint directory.
# A model whose tokenizer the corpus lacks (meta.txt "tokenizer none": Gemma 1/2/3, SmolLM2) is
# converted with GPT-2's tokenizer and checked for 1 and 3 only.
# usage: tool_real_models.sh FG-CONVERT FG-INFER FG-TOKENIZE DUMP-LOGITS TINY REAL GPT2 WORKDIR
set -euo pipefail
CONVERT=$1 INFER=$2 TOKENIZE=$3 DUMP=$4 TINY=$(readlink -f "$5") REAL=$(readlink -f "$6")
GPT2=$(readlink -f "$7") WORK=$8
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
fail() { echo "tool_real_models: $*" >&2; exit 1; }
bad=0 n=0
miss() { echo "tool_real_models: $*" >&2; bad=$((bad + 1)); } # every check of every model runs
for ref in "$TINY"/*.ref; do
  name=$(basename "$ref" .ref)
  ck=$name && rm -rf "$ck" "$name.store" && mkdir "$ck"
  cp "$TINY/$name/"*.json "$ck/"
  xz -dc "$TINY/$name/model.safetensors.xz" > "$ck/model.safetensors"
  for f in generation_config.json tokenizer.json tokenizer_config.json special_tokens_map.json tokenizer.model \
           vocab.json merges.txt added_tokens.json chat_template.jinja chat_template.json; do
    if [ -f "$REAL/$name/$f.xz" ]; then xz -dc "$REAL/$name/$f.xz" > "$ck/$f"
    elif [ -f "$REAL/$name/$f" ]; then cp "$REAL/$name/$f" "$ck/$f"; fi
  done
  tok=() # no published tokenizer in the corpus: the model alone (GPT-2's tokenizer to convert)
  grep -q '^tokenizer none' "$ref/meta.txt" && tok=(--tokenizer "$GPT2")
  if ! "$CONVERT" "$ck" -o "$name.store" --quiet "${tok[@]}"; then
    miss "$name: fg-convert failed" && rm -rf "$ck" && n=$((n + 1)) && continue
  fi
  want_prompt=$(sed -n 's/^prompt: //p' "$ref/greedy.txt")
  want=$(sed -n 's/^output: //p' "$ref/greedy.txt")
  if [ ${#tok[@]} -eq 0 ]; then
    got=$("$TOKENIZE" --dir "$ck" -f "$ref/prompt.txt" | tr -s ' \n' '  ' | sed 's/ *$//') ||
      fail "$name: fg-tokenize"
    [ "$got" = "$want_prompt" ] ||
      miss "$name: prompt ids $got, transformers' tokenizer(text) $want_prompt"
  fi
  echo "$want_prompt" > ids.txt
  "$DUMP" "$name.store" ids.txt out ram "$(wc -w <<< "$want")" > /dev/null ||
    fail "$name: dump_logits"
  got=$(tr -s ' ' ' ' < out.gen | sed 's/ *$//')
  rm -f out.logits out.single out.steps
  [ "$got" = "$want" ] || miss "$name: greedy tokens $got, transformers $want"
  if [ ${#tok[@]} -gt 0 ]; then
    echo "$name: imported; greedy tokens equal transformers' (no tokenizer in the corpus)"
    rm -rf "$ck" "$name.store" && n=$((n + 1)) && continue
  fi
  text=$(sed -n 's/^prompt_text_json //p' "$ref/meta.txt")
  printf '{"id": "p", "prompt": %s, "max_new_tokens": %s}\n' "$text" "$(wc -w <<< "$want")" \
    > in.jsonl
  # a text whose ids depend on the tokenizer class transformers picks (config.json's model_type
  # over tokenizer_config.json's class: a LlamaTokenizer rebuild or the file as it is): the
  # store's prompts must be encoded as fg-tokenize encodes the checkpoint directory
  tricky=' Hello  world<s>x</s> <unk>\n\nA  b'
  printf '{"id": "t", "prompt": "%s", "max_new_tokens": 1}\n' "${tricky//$'\n'/\\n}" >> in.jsonl
  want_tricky=$(printf '%b' "$tricky" | "$TOKENIZE" --dir "$ck" -f - | tr -s ' \n' '  ' | sed 's/ *$//')
  rm -f out.jsonl
  "$INFER" -m "$name.store" --input in.jsonl --output out.jsonl --quiet --threads 1 \
    --prompt-ids || miss "$name: the job failed"
  got=$(grep '"id": *"p"' out.jsonl | sed -n 's/.*"tokens": *\[\([0-9, ]*\)\].*/\1/p' | tr -d ' ' | tr ',' ' ')
  [ "$got" = "$want" ] || miss "$name: fg-infer's job gave $got, transformers $want"
  got=$(grep '"id": *"p"' out.jsonl | sed -n 's/.*"prompt_ids": *\[\([0-9, ]*\)\].*/\1/p' | tr -d ' ' | tr ',' ' ')
  [ "$got" = "$want_prompt" ] || miss "$name: fg-infer's prompt ids $got, transformers $want_prompt"
  got=$(grep '"id": *"t"' out.jsonl | sed -n 's/.*"prompt_ids": *\[\([0-9, ]*\)\].*/\1/p' | tr -d ' ' | tr ',' ' ')
  [ "$got" = "$want_tricky" ] ||
    miss "$name: fg-infer encoded the tricky text as $got, fg-tokenize on the checkpoint as $want_tricky"
  echo "$name: checked"
  rm -rf "$ck" "$name.store"
  n=$((n + 1))
done
[ $n -ge 1 ] || fail "no models in $TINY"
[ $bad -eq 0 ] || fail "$bad checks of $n models failed"
echo "$n models: imported; prompt ids, greedy tokens and the job's tokens equal transformers'"
