#!/usr/bin/env bash
# End-to-end check of fg-tokenize: encode text (argument and file), decode ids back, special
# tokens with --special, and one-line errors with exit 1 for a bad tokenizer dir and a bad id;
# then a tokenizer.json directory (the Llama 3-like fixture): file round trip and --bos.
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
set +e
err=$("$TOK" --dir "$GPT2" --decode 15496 50257 2>&1 >/dev/null); rc=$?
set -e
[ $rc -eq 1 ] && grep -q 'ids\[1\] = 50257' <<<"$err" || { echo "bad id: rc=$rc $err"; exit 1; }
ids=$("$TOK" --dir "$LLAMA3" -f "$WORK/in.txt")
"$TOK" --dir "$LLAMA3" --decode <<<"$ids" >"$WORK/back3.txt"
cmp "$WORK/in.txt" "$WORK/back3.txt" || { echo "tokenizer.json file round trip: $ids"; exit 1; }
ids=$("$TOK" --dir "$LLAMA3" --bos --special "Hi<|eot_id|>")
out=$("$TOK" --dir "$LLAMA3" --decode $ids)
[ "$out" = "<|begin_of_text|>Hi<|eot_id|>" ] || { echo "tokenizer.json --bos: $ids -> $out"; exit 1; }
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
t 'not an id: "caf' 2 --decode
set +e; err=$("$TOK" --dir "$GPT2" hello 2>&1 >/dev/full); rc=$?; set -e
[ $rc -eq 1 ] && [[ $err == *"stdout: write error"* ]] || { echo ">/dev/full: rc=$rc $err"; exit 1; }
echo ok
