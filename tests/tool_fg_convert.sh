#!/usr/bin/env bash
# fg-convert end to end:
#  1. bad checkpoints (disallowed pickle global, compressed zip entry, overlapping or truncated
#     safetensors, missing/extra/misshapen tensors) exit 1 with one line naming the file and
#     tensor, and leave no store behind; an existing non-empty destination is refused untouched;
#  2. a 300 MB F32 checkpoint (written here as safetensors: header + zero data) converts with peak
#     RSS under 2 x its largest tensor + 256 MiB (the documented bound; it streams ~4 MiB chunks),
#     F16 and 4-bit, and fg-inspect --verify passes on both stores.
set -euo pipefail
CONVERT=$1 INSPECT=$2 FIX=$3 TOK=$4 WORK=$5
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"

for d in bad_bin_global bad_bin_compressed bad_st_overlap bad_st_truncated opt_tiny_missing \
         opt_tiny_extra opt_tiny_badshape bad_bin_noncontig; do
  set +e; err=$("$CONVERT" "$FIX/$d" -o "out_$d" --tokenizer "$TOK" 2>&1); rc=$?; set -e
  [ $rc -eq 1 ] || { echo "$d: exit $rc ($err)"; exit 1; }
  [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] || { echo "$d: not one line: $err"; exit 1; }
  [ ! -e "out_$d" ] || { echo "$d: left out_$d behind"; exit 1; }
done
mkdir keep && echo precious > keep/file
set +e; "$CONVERT" "$FIX/opt_tiny" -o keep --tokenizer "$TOK" 2>/dev/null; rc=$?; set -e
[ $rc -eq 1 ] && [ "$(cat keep/file)" = precious ] || { echo "non-empty destination: rc=$rc"; exit 1; }
# a FIFO where the checkpoint's config.json belongs is named, not waited on (a writer never comes)
mkdir fifo_ck && cp "$FIX/opt_tiny/"*.safetensors fifo_ck/ && mkfifo fifo_ck/config.json
set +e; err=$(timeout 20 "$CONVERT" fifo_ck -o out_fifo --tokenizer "$TOK" 2>&1); rc=$?; set -e
[ $rc -eq 1 ] && [[ "$err" == *"fifo_ck/config.json: a FIFO, not a regular file" ]] && [ ! -e out_fifo ] ||
  { echo "a FIFO config.json: rc=$rc $err"; exit 1; }
# what a new user tries first (issue 38): a path that is not there, a truncated GGUF file, a Llama
# checkpoint without its tokenizer.json: one line each saying so, exit 1, nothing left behind
printf 'GGUF\003\000\000\000' > model.gguf && cp model.gguf renamed.bin
mkdir notok && cp "$FIX/../llama/llama2-tiny-bf16/"{config.json,model.safetensors} notok/
for c in "nosuch:nosuch does not exist" \
         "model.gguf:model.gguf: the GGUF tensor count at byte 8 runs past the end" \
         "renamed.bin:renamed.bin: the GGUF tensor count at byte 8" "notok:notok: no tokenizer.json"; do
  src=${c%%:*} want=${c#*:}
  set +e; err=$("$CONVERT" "$src" -o out_user 2>&1); rc=$?; set -e
  [ $rc -eq 1 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] && [[ "$err" == *"$want"* ]] &&
    [[ "$err" != *vocab.json* || "$src" != notok ]] && [ ! -e out_user ] ||
    { echo "$src: rc=$rc: $err (want '$want')"; exit 1; }
done
echo "bad inputs: one line each, nothing left behind"

# ---- a 300 MB checkpoint: vocab 50272 x hidden 1024 f32 embedding (206 MB) is the largest tensor
H=1024 F=4096 V=50272 P=2050 L=2
mkdir ck && cd ck
cat > config.json <<JSON
{"model_type": "opt", "vocab_size": $V, "hidden_size": $H, "num_hidden_layers": $L,
 "num_attention_heads": 16, "ffn_dim": $F, "max_position_embeddings": $((P - 2)),
 "word_embed_proj_dim": $H, "do_layer_norm_before": true, "activation_function": "relu",
 "torch_dtype": "float32"}
JSON
names=() shapes=()
add() { names+=("$1"); shapes+=("$2"); }
add model.decoder.embed_tokens.weight "$V,$H"
add model.decoder.embed_positions.weight "$P,$H"
add model.decoder.final_layer_norm.weight "$H"
add model.decoder.final_layer_norm.bias "$H"
for l in $(seq 0 $((L - 1))); do
  p=model.decoder.layers.$l
  for m in q k v out; do add $p.self_attn.${m}_proj.weight "$H,$H"; add $p.self_attn.${m}_proj.bias "$H"; done
  for n in self_attn_layer_norm final_layer_norm; do add $p.$n.weight "$H"; add $p.$n.bias "$H"; done
  add $p.fc1.weight "$F,$H"; add $p.fc1.bias "$F"; add $p.fc2.weight "$H,$F"; add $p.fc2.bias "$H"
done
off=0 json="{"
for i in "${!names[@]}"; do
  bytes=$(( ${shapes[$i]//,/*} * 4 ))
  json+="\"${names[$i]}\": {\"dtype\": \"F32\", \"shape\": [${shapes[$i]}], \"data_offsets\": [$off, $((off + bytes))]},"
  off=$((off + bytes))
done
json="${json%,}}"
len=${#json}
pad=$(( (8 - len % 8) % 8 )); json+=$(printf '%*s' $pad ''); len=$((len + pad))
{ printf "$(printf '\\x%02x' $((len & 255)) $(((len >> 8) & 255)) $(((len >> 16) & 255)) 0 0 0 0 0)"
  printf '%s' "$json"; head -c $off /dev/zero; } > model.safetensors
cd ..
largest=$((V * H * 4))
limit=$((2 * largest + 256 * 1024 * 1024))
for q in "" --compress-weight; do
  out=$("$CONVERT" ck -o "store$q" --tokenizer "$TOK" $q 2>&1)
  rss=$(echo "$out" | sed -nE 's/.*peak RSS [^(]*\(([0-9]+) bytes.*/\1/p')
  [ -n "$rss" ] && [ "$rss" -le "$limit" ] || { echo "peak RSS $rss > $limit: $out"; exit 1; }
  "$INSPECT" --verify --no-chunks "store$q" > /dev/null
  echo "converted $off bytes${q:+ ($q)}: peak RSS $rss bytes (bound $limit)"
done
# 8-bit groups: every 2-D tensor is Q8 (fg-inspect lists its codec); --weight-bits 5 is a usage error
"$CONVERT" store -o store-q8 --weight-bits 8 --group-axis 1 --quiet
"$INSPECT" --verify --no-chunks store-q8 > q8.txt
grep -q 'model.decoder.layers.0.fc1.weight *q8' q8.txt || { echo "no q8 fc1:"; cat q8.txt; exit 1; }
notq8=$(grep -E '^ *model[^ ]*weight +(f16|q4)' q8.txt | grep -v -E 'layer_norm' || true)
[ -z "$notq8" ] ||
  { echo "a 2-D tensor not q8:"; cat q8.txt; exit 1; }
# chunks of ~4 MiB stored bytes when grouped along the input axis (F16: ~4 MiB of rows): the
# 50272 x 1024 embedding is 25 F16 chunks and 14 Q8 ones (1088 bytes a row)
chunks() { "$INSPECT" --no-chunks "$1" | awk '$1 == "model.decoder.embed_tokens.weight" { print $5 }'; }
[ "$(chunks store)" = 25 ] && [ "$(chunks store-q8)" = 14 ] ||
  { echo "embedding chunks: F16 $(chunks store), Q8 $(chunks store-q8) (want 25, 14)"; exit 1; }
set +e; err=$("$CONVERT" store -o store-q5 --weight-bits 5 2>&1); rc=$?; set -e
[ $rc -eq 2 ] && [[ $err == *"--weight-bits 5"* ]] && [ ! -e store-q5 ] ||
  { echo "--weight-bits 5: rc $rc: $err"; exit 1; }
echo "8-bit store ok"

# ---- hostile flags: usage errors (exit 2, one line naming the flag), nothing written
usage_fail() {
  local want=$1; shift
  set +e; err=$("$CONVERT" "$@" 2>&1 >/dev/null); rc=$?; set -e
  [ $rc -eq 2 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] && [[ $err == *"$want"* ]] &&
    [ ! -e out-usage ] || { echo "fg-convert $*: rc $rc, want 2 naming '$want': $err"; exit 1; }
}
usage_fail "--group-size +32" "$FIX/opt_tiny" -o out-usage --compress-weight --group-size +32
usage_fail "--chunk-mib  5" "$FIX/opt_tiny" -o out-usage --chunk-mib " 5"
usage_fail "--seed belongs to fg-convert synth" "$FIX/opt_tiny" -o out-usage --seed 3
usage_fail "--model belongs to fg-convert synth" "$FIX/opt_tiny" -o out-usage --model opt-125m
usage_fail "--group-size needs" "$FIX/opt_tiny" -o out-usage --group-size 32
usage_fail "-o given twice" "$FIX/opt_tiny" -o out-usage -o out-usage2
usage_fail "-o: an empty value" "$FIX/opt_tiny" -o ""
usage_fail "synth needs --tokenizer" synth --model opt-tiny -o out-usage
usage_fail "value: -z " "$FIX/opt_tiny" -zz -o out-usage
echo "hostile flags: exit 2, one line each"

# ---- a conversion killed (SIGTERM) before its commit removes its store and dies of the signal;
# one that wins the race is whole
set +e
"$CONVERT" ck -o killed --tokenizer "$TOK" --quiet 2>kill.err & pid=$!
for _ in $(seq 200); do [ -e killed/weights-000001.fgt ] && break; sleep 0.05; done
kill -TERM $pid; wait $pid; rc=$?
set -e
if [ $rc -eq 143 ]; then
  [ ! -e killed ] && grep -q 'interrupted (Terminated): the unfinished store killed was removed' kill.err &&
    [ "$(grep -c . kill.err)" -eq 1 ] || { echo "SIGTERM: left $(ls killed 2>&1): $(cat kill.err)"; exit 1; }
  echo "SIGTERM mid-conversion: no store left, one line"
else
  [ $rc -eq 0 ] && "$INSPECT" --verify --no-chunks killed >/dev/null ||
    { echo "SIGTERM: exit $rc and not a whole store: $(cat kill.err)"; exit 1; }
  echo "SIGTERM came after the commit: the store is whole"
fi
# a conversion that fails into an existing empty -o directory (a full disk: needs a tmpfs, so a
# user namespace) leaves the directory as it was, empty
mkdir -p small
if unshare --user --map-root-user --mount sh -c 'mount -t tmpfs -o size=1m tmpfs small' 2>/dev/null; then
  set +e
  left=$(unshare --user --map-root-user --mount bash -c 'mount -t tmpfs -o size=1m tmpfs small &&
         mkdir small/dst && "$0" ck -o small/dst --tokenizer "$1" --quiet 2>small/err; echo "rc=$?";
         ls -A small/dst; cat small/err' "$CONVERT" "$TOK")
  set -e
  [[ $left == "rc=1"$'\n'"fg-convert: small/dst/"*"No space left on device" ]] ||
    { echo "a full disk into an empty -o dir left: $left"; exit 1; }
  echo "full disk into an existing empty dir: nothing left behind"
else
  echo "full disk: skipped (no user namespaces to mount a small tmpfs)"
fi
# ---- synth --zero-weights: matrices and biases as holes (no data written), checksums true, the
# store marked; DeepSeek-V3's 671B shape in a few MiB of disk; the flag is synth's alone
"$CONVERT" synth --model qwen3-moe-tiny --zero-weights -o zw --tokenizer "$TOK" --quiet
"$CONVERT" synth --model qwen3-moe-tiny -o zr --tokenizer "$TOK" --quiet
zw_disk=$(du -sk zw | cut -f1) zr_disk=$(du -sk zr | cut -f1)
[ "$zw_disk" -lt $((zr_disk / 4)) ] || { echo "zero-weights store: $zw_disk KiB on disk vs $zr_disk"; exit 1; }
out=$("$INSPECT" --verify zw)
[[ $out == *"weights: all zero (fg-convert synth --zero-weights)"* && $out == *"sparse: "*" bytes on disk"* &&
   $out == *"verify: ok"* ]] || { echo "fg-inspect on a zero-weights store: $out"; exit 1; }
out=$("$INSPECT" zr)
[[ $out != *"all zero"* && $out != *"sparse:"* ]] || { echo "fg-inspect on a random store: $out"; exit 1; }
out=$("$INSPECT" --json zw)
[[ $out == *'"zero_weights": true'* && $out == *'"disk_bytes": '* ]] || { echo "--json: $out"; exit 1; }
"$CONVERT" synth --model deepseek-v3 --zero-weights --compress-weight --group-axis 1 -o v3z \
  --tokenizer "$TOK" --quiet
v3_disk=$(du -sk v3z | cut -f1) v3_size=$(du -sk --apparent-size v3z | cut -f1)
[ "$v3_disk" -lt 65536 ] && [ "$v3_size" -gt $((300 * 1024 * 1024)) ] ||
  { echo "deepseek-v3 zero-weights: $v3_disk KiB on disk, $v3_size KiB apparent"; exit 1; }
rm -rf v3z zw zr
usage_fail "--zero-weights belongs to fg-convert synth" "$FIX/opt_tiny" -o out-usage --zero-weights
echo "synth --zero-weights: holes, verified, marked; deepseek-v3 in ${v3_disk} KiB of disk"
echo "fg-convert end-to-end ok"
