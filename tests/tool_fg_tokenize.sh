#!/usr/bin/env bash
# End-to-end check of fg-tokenize: encode text (argument and file), decode ids back, special
# tokens, and one-line errors with exit 1 for a bad tokenizer dir and a bad id (an id past the
# vocabulary decodes as nothing: issue 38); then a tokenizer.json directory (the Llama 3-like
# fixture): file round trip, the default (transformers' tokenizer(text): special tokens matched,
# BOS added) against --raw / --no-special / --no-bos.
set -euo pipefail
TOK=$1 GPT2=$2 WORK=$3 LLAMA3=$4
rm -rf "$WORK" && mkdir -p "$WORK"
out=$("$TOK" --dir "$GPT2" "Hello world")
[ "$out" = "15496 995" ] || { echo "encode: $out"; exit 1; }
out=$("$TOK" --dir "$GPT2" --decode 15496 995)
[ "$out" = "Hello world" ] || { echo "decode: $out"; exit 1; }
printf 'caf\xc3\xa9 \xff\xfe\n\n  x' >"$WORK/in.txt"
ids=$("$TOK" --dir "$GPT2" -f "$WORK/in.txt")
"$TOK" --dir "$GPT2" --decode <<<"$ids" >"$WORK/back.txt"
cmp "$WORK/in.txt" "$WORK/back.txt" || { echo "file round trip: $ids"; exit 1; }
# <|endoftext|> is plain text without --special; GPT-2's dir has no config, so it stays text
out=$("$TOK" --dir "$GPT2" --special "a<|endoftext|>")
[ "$out" = "64 27 91 437 1659 5239 91 29" ] || { echo "special: $out"; exit 1; }
set +e
mkdir -p "$WORK/fifo" && mkfifo "$WORK/fifo/vocab.json" && cp "$GPT2/merges.txt" "$WORK/fifo/"
err=$(timeout 20 "$TOK" --dir "$WORK/fifo" "x" 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && [[ "$err" == *"fifo/vocab.json: a FIFO, not a regular file" ]] ||
  { echo "a FIFO vocab.json: rc=$rc $err"; exit 1; }
err=$("$TOK" --dir "$WORK/nope" "x" 2>&1 >/dev/null); rc=$?
set -e
[ $rc -eq 1 ] && grep -q "$WORK/nope/vocab.json" <<<"$err" || { echo "bad dir: rc=$rc $err"; exit 1; }
[ "$(wc -l <<<"$err")" -eq 1 ] || { echo "not one line: $err"; exit 1; }
# ids past the vocabulary (Qwen2.5's embedding rows beyond its tokens) decode as nothing
out=$("$TOK" --dir "$GPT2" --decode 15496 50257 995 2147483647)
[ "$out" = "Hello world" ] || { echo "id past the vocabulary: $out"; exit 1; }
out=$("$TOK" --dir "$LLAMA3" --decode 1200 39 72 1204 99999 <<<"")
[ "$out" = "<|begin_of_text|>Hi<|eot_id|>" ] || { echo "tokenizer.json, id past the vocabulary: $out"; exit 1; }
set +e
err=$("$TOK" --dir "$GPT2" --decode -- 15496 -5 2>&1 >/dev/null); rc=$?
set -e
[ $rc -eq 1 ] && grep -q 'ids\[1\] = -5 is not a token id' <<<"$err" || { echo "negative id: rc=$rc $err"; exit 1; }
ids=$("$TOK" --dir "$LLAMA3" --raw -f "$WORK/in.txt")
"$TOK" --dir "$LLAMA3" --decode <<<"$ids" >"$WORK/back3.txt"
cmp "$WORK/in.txt" "$WORK/back3.txt" || { echo "tokenizer.json file round trip: $ids"; exit 1; }
ids=$("$TOK" --dir "$LLAMA3" --bos --special "Hi<|eot_id|>")
out=$("$TOK" --dir "$LLAMA3" --decode $ids)
[ "$out" = "<|begin_of_text|>Hi<|eot_id|>" ] || { echo "tokenizer.json --bos: $ids -> $out"; exit 1; }
# the default is transformers' tokenizer(text); --raw the text alone, special tokens as text
[ "$("$TOK" --dir "$LLAMA3" "Hi<|eot_id|>")" = "$ids" ] || { echo "default != --bos --special"; exit 1; }
raw=$("$TOK" --dir "$LLAMA3" --raw "Hi<|eot_id|>")
[ "$("$TOK" --dir "$LLAMA3" --decode $raw)" = "Hi<|eot_id|>" ] && [ "$(wc -w <<<"$raw")" -gt 3 ] &&
  [[ " $raw " != *" ${ids%% *} "* ]] || { echo "--raw: $raw"; exit 1; }
nb=$("$TOK" --dir "$LLAMA3" --no-bos "Hi<|eot_id|>")
[ "$nb" = "${ids#* }" ] || { echo "--no-bos: $nb (default $ids)"; exit 1; }
ns=$("$TOK" --dir "$LLAMA3" --no-special "Hi<|eot_id|>")
[ "$ns" = "${ids%% *} $raw" ] || { echo "--no-special: $ns"; exit 1; }
# hostile input: one line each naming the culprit; usage errors exit 2, bad input 1
t() { local want=$1 code=$2; shift 2
  set +e; err=$("$TOK" --dir "$GPT2" "$@" 2>&1 >/dev/null <"$WORK/in.txt"); rc=$?; set -e
  [ $rc -eq "$code" ] && [ "$(grep -c . <<<"$err")" -eq 1 ] && [[ $err == *"$want"* ]] ||
    { echo "fg-tokenize $*: rc=$rc (want $code, '$want'): $err"; exit 1; }; }
mkdir -p "$WORK/adir"
t "--bogus" 2 --bogus
t "value: -z " 2 -zz
t "value: -f " 2 -f
t "give TEXT arguments or -f FILE, not both" 2 hi -f "$WORK/in.txt"
t "--decode reads ids from arguments or stdin" 2 --decode -f "$WORK/in.txt"
t "adir: Is a directory" 1 -f "$WORK/adir"
t "99999999999 is not a token id" 1 --decode 99999999999
t 'ids[0] = "caf' 2 --decode
t "negative number is not a token id" 2 --decode 1 -5
set +e; err=$("$TOK" --dir "$GPT2" hello 2>&1 >/dev/full); rc=$?; set -e
[ $rc -eq 1 ] && [[ $err == *"stdout: write error"* ]] || { echo ">/dev/full: rc=$rc $err"; exit 1; }
# --help comes from the option table (tools/tool_args.c): every option is in it, with its value
# name; a --help nobody received is a failure too (it was exit 0)
help=$("$TOK" --help)
for o in "--dir DIR" --no-special --no-bos --raw --special --bos "-f FILE" --decode \
         --skip-special --version "-h, --help"; do
  [[ $help == *"  $o "* ]] || { echo "--help does not list $o: $help"; exit 1; }
done
set +e; err=$("$TOK" --help 2>&1 >/dev/full); rc=$?; set -e
[ $rc -eq 1 ] && [[ $err == *"stdout: write error"* ]] || { echo "--help >/dev/full: rc=$rc $err"; exit 1; }
echo ok
