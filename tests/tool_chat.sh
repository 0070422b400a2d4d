#!/usr/bin/env bash
# Chat templates reachable from fg-infer (issue 40, items 2 and 7): for each model of
# tests/fixtures/chatrun (make_chat_ids.py: Qwen2.5, Qwen3, Llama 3.2 with their published
# tokenizer_config.json, so their published chat templates) the checkpoint is assembled from
# tests/fixtures/real-tiny (a shrunk config, random weights) and tests/fixtures/real (the
# tokenizer files), converted, and
#   1. a job of "messages" lines (multi-turn, unicode, "chat_template_kwargs" such as Qwen3's
#      enable_thinking) runs with --prompt-ids: each line's ids are transformers'
#      apply_chat_template(messages, add_generation_prompt=True, tokenize=True) (no second BOS
#      where the template writes one: Llama 3.2's <|begin_of_text|>);
#   2. -p TEXT --chat runs the same ids as the job line with that one user message (the plan of
#      --dry-run names the prompt's token count);
#   3. malformed lines get error results naming what is wrong and the job goes on: messages not
#      an array, a message without role or content, prompt and messages together, kwargs not an
#      object, a template's raise_exception;
# and a store without a chat template (TinyLlama's stored tokenizer_config.json has none) fails
# --chat and a messages job with one line naming the store, while its plain prompts still run.
# usage: tool_chat.sh FG-CONVERT FG-INFER TINY REAL CHATRUN WORKDIR
set -euo pipefail
CONVERT=$1 INFER=$2 TINY=$(readlink -f "$3") REAL=$(readlink -f "$4") FIX=$(readlink -f "$5")
WORK=$6
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
fail() { echo "tool_chat: $*" >&2; exit 1; }
bad=0
miss() { echo "tool_chat: $*" >&2; bad=$((bad + 1)); }
# assemble NAME: the checkpoint directory NAME as the hub has it, converted into NAME.store
assemble() {
  rm -rf "$1" "$1.store" && mkdir "$1"
  cp "$TINY/$1/"*.json "$1/"
  xz -dc "$TINY/$1/model.safetensors.xz" > "$1/model.safetensors"
  for f in generation_config.json tokenizer.json tokenizer_config.json special_tokens_map.json \
           vocab.json merges.txt chat_template.jinja chat_template.json; do
    if [ -f "$REAL/$1/$f.xz" ]; then xz -dc "$REAL/$1/$f.xz" > "$1/$f"
    elif [ -f "$REAL/$1/$f" ]; then cp "$REAL/$1/$f" "$1/$f"; fi
  done
  "$CONVERT" "$1" -o "$1.store" --quiet || fail "$1: fg-convert failed"
}
# ids_of ID FILE: the prompt ids of result ID in FILE, space-separated
ids_of() {
  grep "\"id\": *\"$1\"" "$2" | sed -n 's/.*"prompt_ids": *\[\([0-9, ]*\)\].*/\1/p' | tr -d ' ' |
    tr ',' ' '
}
# bad_lines NAME: malformed lines answered by error results naming what is wrong, the job goes on
bad_lines() {
  cat > bad.jsonl <<'JSONL'
{"id": "ok", "messages": [{"role": "user", "content": "hi"}], "max_new_tokens": 1}
{"id": "na", "messages": "hi"}
{"id": "empty", "messages": []}
{"id": "norole", "messages": [{"content": "x"}]}
{"id": "nocontent", "messages": [{"role": "user"}]}
{"id": "notobj", "messages": ["x"]}
{"id": "both", "prompt": "x", "messages": [{"role": "user", "content": "x"}]}
{"id": "kw", "messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": [1]}
{"id": "plain", "prompt": "hello", "max_new_tokens": 1}
JSONL
  "$INFER" -m "$1.store" --input bad.jsonl --output bad.out --quiet --threads 1 ||
    miss "$1: a job with malformed lines failed instead of answering them"
  local want
  for want in 'na|"messages\\" must be a non-empty array' \
              'empty|"messages\\" must be a non-empty array' \
              'norole|"messages\\"\[0\] has no \\"role\\" string' \
              'nocontent|"messages\\"\[0\] has no \\"content\\"' \
              'notobj|"messages\\"\[0\] is not an object' \
              'both|"prompt\\" and \\"messages\\" together' \
              'kw|"chat_template_kwargs\\" must be an object'; do
    line=$(grep "\"id\":\"${want%%|*}\"" bad.out | grep '"type":"invalid_request"' || true)
    grep -q "${want#*|}" <<< "$line" || miss "$1: line ${want%%|*}: no error result matching ${want#*|}"
  done
  for id in ok plain; do
    grep -q '"tokens":\[' <<< "$(grep "\"id\":\"$id\"" bad.out)" || miss "$1: line $id was not answered"
  done
  echo "$1: malformed messages lines get error results, the others run"
}
for ids in "$FIX"/*.ids.txt; do # a model's own job lines, else the shared ones
  name=$(basename "$ids" .ids.txt) && jobs="$FIX/$name.jobs.jsonl"
  [ -e "$jobs" ] || jobs="$FIX/shared.jobs.jsonl"
  assemble "$name"
  before=$bad
  "$INFER" -m "$name.store" --input "$jobs" --output out.jsonl --quiet --threads 1 \
    --prompt-ids || miss "$name: the messages job failed"
  while read -r id want; do
    got=$(ids_of "$id" out.jsonl)
    [ "$got" = "$want" ] || miss "$name: line $id: fg-infer's ids $got, transformers' $want"
  done < "$FIX/$name.ids.txt"
  [ $bad -eq $before ] &&
    echo "$name: the messages job's prompt ids equal transformers' apply_chat_template"
  # -p TEXT --chat: line "one"'s message (no kwargs needed but Llama's date): its plan's context
  # is the line's ids + 1 new token
  if [ "$name" != meta-llama__Llama-3.2-3B-Instruct ]; then
    want=$(( $(grep '^one ' "$FIX/$name.ids.txt" | wc -w) - 1 + 1 ))
    plan=$("$INFER" -m "$name.store" -p "Hello, who are you?" --chat --max-new-tokens 1 \
      --dry-run 2>&1) || miss "$name: -p --chat --dry-run failed: $plan"
    grep -q "context $want," <<< "$plan" || miss "$name: -p --chat's plan is not for $want: $plan"
    "$INFER" -m "$name.store" -p "Hello, who are you?" --chat --max-new-tokens 2 --quiet \
      --threads 1 > reply.txt || miss "$name: -p --chat failed"
    [ -s reply.txt ] || miss "$name: -p --chat printed nothing"
  fi
  [ "$name" = Qwen__Qwen3-1.7B ] && bad_lines "$name"
  rm -rf "$name" "$name.store" out.jsonl
done

# a template's raise_exception (Mistral v0.3: roles must alternate) is that line's error result
name=mistralai__Mistral-7B-Instruct-v0.3
assemble "$name"
printf '%s\n' '{"id": "r", "messages": [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]}' \
  '{"id": "ok", "messages": [{"role": "user", "content": "x"}], "max_new_tokens": 1}' > raise.jsonl
"$INFER" -m "$name.store" --input raise.jsonl --output raise.out --quiet --threads 1 ||
  miss "$name: the job with a refused conversation failed"
grep -q 'raise_exception: Conversation roles must alternate' <<< "$(grep '"id":"r"' raise.out)" ||
  miss "$name: the template's raise_exception is not line r's error: $(cat raise.out)"
grep -q '"tokens":\[' <<< "$(grep '"id":"ok"' raise.out)" || miss "$name: line ok was not answered"
echo "$name: the template's raise_exception is the line's error result"
rm -rf "$name" "$name.store"
# a store without a chat template: --chat and messages fail naming the store; prompts still run
name=TinyLlama__TinyLlama-1.1B-Chat-v1.0
assemble "$name"
want="$name.store: the model has no chat template (tokenizer_config.json chat_template, chat_template.jinja)"
if out=$("$INFER" -m "$name.store" -p hi --chat --max-new-tokens 1 --quiet 2>&1); then
  miss "$name: -p --chat ran without a template"
fi
grep -qF "$want" <<< "$out" || miss "$name: -p --chat said: $out"
if out=$("$INFER" -m "$name.store" --input "$FIX/shared.jobs.jsonl" --output none.out \
         --quiet 2>&1); then
  miss "$name: a messages job ran without a template"
fi
grep -qF "$want" <<< "$out" || miss "$name: the messages job said: $out"
"$INFER" -m "$name.store" -p hi --max-new-tokens 1 --quiet --threads 1 > /dev/null ||
  miss "$name: a plain prompt failed on a store without a template"
if out=$("$INFER" -m "$name.store" --chat --prompt-len 4 --gen-len 1 --quiet 2>&1); then
  miss "--chat with --prompt-len ran"
fi
grep -q -- "choose one of -p PROMPT, --chat," <<< "$out" || miss "--chat --prompt-len said: $out"
if out=$(echo hi | "$INFER" -m "$name.store" --chat --quiet 2>&1); then
  miss "$name: the interactive --chat ran without a template"
fi
grep -qF "has no chat template" <<< "$out" || miss "$name: the interactive --chat said: $out"
echo "$name: no chat template: --chat and messages refused naming the store, prompts run"
[ $bad -eq 0 ] || fail "$bad checks failed"
echo "tool_chat: all checks passed"
