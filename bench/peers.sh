#!/usr/bin/env bash
# fg against CTranslate2 and transformers on the same model, prompts and machine (issue 16).
#
# Makes a venv (VENV, default build/peers-venv) and pip-installs ctranslate2, transformers and
# torch into it when they are missing; saves a random-weight OPT with transformers (shape flags
# in SHAPE, default opt-1.3b; values F16-representable so every f32 path sees the same weights);
# converts it for fg (fg-convert import: F16; re-encoded to 4-bit and 8-bit groups along the
# input axis for --compute int8) and for CTranslate2 (float32, int8 quantized at load); then, for
# each scenario, ROUNDS interleaved rounds of every system on the same prompts, greedy, THREADS
# threads, all in RAM. Prints tok/s per round, the means, fg's ratios to CTranslate2, and whether
# the f32 paths (fg's F16 store computed in f32, transformers float32, CTranslate2 float32)
# generated the same tokens. Generation only is timed (loading and conversion are not).
#
# usage: bench/peers.sh [ROUNDS]      (default 3)
# env:   SCENARIOS  "NAME:PROMPTS:PROMPT_LEN:GEN_LEN:GBSxNGB ..."
#                   (default "b32:32:128:32:8x4 b1:1:16:32:1x1": the issue's two)
#        SYSTEMS    subset of "fg-F16 fg-F16-bf16 fg-Q4-int8 fg-Q8-int8 fg-Q4-f32 ct2-float32 ct2-int8
#                   hf-float32" (fg-F16-bf16: the F16 store under --compute bf16)
#        RES        the results file (default WORK/results.tsv, emptied first unless APPEND=1;
#                   FIRST_ROUND=N numbers this run's rounds from N, to add rounds to a file)
#        HF_ROUNDS  rounds of transformers (2: it is the slowest); ROUNDS=0 only prepares
#        SHAPE      peers.py make flags (e.g. "--hidden 768 --layers 12 --heads 12 --ffn 3072"
#                   for opt-125m); WORK (build/peers), BIN (build), THREADS (2), DISK=1 adds
#                   fg F16 with its weights homed on disk (--percent 0 0 0 100 0 100)
#        OPT=0      skips the OPT part (CTranslate2, transformers)
#
# llama.cpp (issue 43; LLAMACPP=0 skips it): built by bench/llamacpp.sh (the llama-cpp-python
# sdist's vendored llama.cpp, GGML_NATIVE, cached); a random-weight Llama of TinyLlama-1.1B's shape
# (peers.py make-llama; GPT-2's vocabulary) converted by its convert_hf_to_gguf.py to an F16 GGUF,
# that quantized by llama-quantize to Q4_0 and Q8_0; fg's stores from the same checkpoint (F16,
# and 4-bit and 8-bit groups along the input axis under --compute int8). Per round, for each
# LLAMA_SCENARIOS entry "NAME:PROMPTS:PROMPT_LEN:GEN_LEN:GBSxNGB" (default
# "b32:32:128:32:8x4 b1:1:128:32:1x1"):
#   batch above 1: llama-batched-bench -npp PROMPT_LEN -ntg GEN_LEN-1 -npl PROMPTS (the prefill's
#                  logits give the first token, as in fg's count: GEN_LEN tokens a prompt);
#   batch 1:       llama-bench -p PROMPT_LEN -n GEN_LEN (pp and tg rates, each its own run);
#   fg:            fg-infer --prompt-len PROMPT_LEN --gen-len GEN_LEN --warmup (synthetic prompts,
#                  as the llama.cpp benches' random tokens; one block untimed first, as
#                  llama-bench's warm-up run and the benches' untimed mmap load: FG_WARMUP= (empty)
#                  times fg's first block cold, its weights' first reads included).
# Printed per system: tok/s overall (GEN_LEN tokens a prompt over prefill + decode), the prefill's
# prompt tok/s and the decode's tok/s; then the means and fg's ratios to llama.cpp.
# LLAMA_SYSTEMS: subset of "fg-F16 fg-F16-bf16 llama.cpp-F16 fg-Q4-int8 llama.cpp-Q4_0 fg-Q8-int8
#               llama.cpp-Q8_0"
# LLAMA_SHAPE: make-llama flags after the defaults (e.g. "--layers 8", in a WORK of its own);
# LRES: the llama rows' file (default WORK/llama.tsv)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build}
WORK=${WORK:-$ROOT/build/peers}
VENV=${VENV:-$ROOT/build/peers-venv}
ROUNDS=${1:-3}
THREADS=${THREADS:-2}
SCENARIOS=${SCENARIOS:-"b32:32:128:32:8x4 b1:1:16:32:1x1"}
SYSTEMS=${SYSTEMS:-"fg-F16 ct2-float32 fg-Q4-int8 ct2-int8 fg-Q8-int8 hf-float32"}
[ -n "${DISK:-}" ] && SYSTEMS="$SYSTEMS fg-F16-disk"
PY="$VENV/bin/python"
PEERS="$ROOT/bench/peers.py"

if ! "$PY" -c 'import ctranslate2, transformers, torch' 2>/dev/null; then
  # Debian's python3-torch where the system has it (PyPI's torch wheels are CUDA builds of
  # several GB), with a transformers that still runs on it; else everything from PyPI
  if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "peers: installing ctranslate2, transformers<4.41 into $VENV (PyPI; the system's torch)" >&2
    /usr/bin/python3 -m venv --system-site-packages --without-pip "$VENV"
    pip --python "$PY" install -q ctranslate2 "transformers<4.41" sentencepiece safetensors
  else
    echo "peers: installing ctranslate2, transformers, torch into $VENV (PyPI)" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q ctranslate2 transformers torch sentencepiece
  fi
fi
"$PY" -c 'import ctranslate2, transformers, torch; print("peers: ctranslate2", ctranslate2.__version__, "transformers", transformers.__version__, "torch", torch.__version__)'

HF=$WORK/hf
mkdir -p "$WORK"
opt_part() {
if [ ! -f "$HF/model.safetensors" ]; then
  # shellcheck disable=SC2086
  "$PY" "$PEERS" make "$HF" --tokenizer "$ROOT/data/gpt2-tokenizer" ${SHAPE:-}
fi
store() { # name, fg-convert flags...
  [ -d "$WORK/$1" ] || "$BIN/fg-convert" "${@:2}" -o "$WORK/$1" --quiet
}
store fg-f16 "$HF"
store fg-q4a1 "$WORK/fg-f16" --compress-weight --group-axis 1
store fg-q8a1 "$WORK/fg-f16" --weight-bits 8 --group-axis 1
store fg-q4a0 "$WORK/fg-f16" --compress-weight
"$PY" "$PEERS" ct2conv "$HF" --ct2-dir "$WORK/ct2"
echo "peers: model $(du -sb "$WORK/fg-f16" | cut -f1) bytes as fg F16, $(du -sb "$WORK/fg-q4a1" | cut -f1) as 4-bit, $(du -sb "$WORK/fg-q8a1" | cut -f1) as 8-bit"

RES=${RES:-$WORK/results.tsv}   # one file per run (rows are appended: RES=... to add to one)
[ -n "${APPEND:-}" ] || : > "$RES"
fg_run() { # scenario round system out store block flags...
  local sc=$1 rd=$2 sys=$3 out=$4 st=$5 blk=$6 log
  rm -f "$out" # fg-infer refuses to overwrite a results file (it would resume it)
  find "$WORK/$st" -type f -exec cat {} + > /dev/null # in the page cache, as the peers' models
  log=$("$BIN/fg-infer" -m "$WORK/$st" --input "$WORK/hf/prompts-$sc.jsonl" --output "$out" \
        --threads "$THREADS" --gpu-batch-size "${blk%x*}" --num-gpu-batches "${blk#*x}" \
        --max-new-tokens "$GL" "${@:7}" 2>&1 >/dev/null) || { echo "peers: $sys: $log" >&2; }
  local tps; tps=$(echo "$log" | sed -nE 's/^summary: .*: ([0-9.]+) tok\/s$/\1/p')
  echo "  $sc round $rd $sys: ${tps:-failed} tok/s ($(echo "$log" | sed -nE 's/^summary: [0-9]+ tokens generated in (.*\)).*/\1/p'))"
  printf '%s\t%s\t%s\t%s\t%s\tfg\n' "$sc" "$sys" "$rd" "${tps:-0}" "$out" >> "$RES"
}
py_run() { # scenario round system out peers.py-args...
  local sc=$1 rd=$2 sys=$3 out=$4 log tps
  log=$("$PY" "$PEERS" "${@:5}" "$HF" --tag "$sc" --gen "$GL" --batch "$NP" --threads "$THREADS" \
        --out "$out" 2>&1) || { echo "peers: $sys: $log" >&2; }
  tps=$(echo "$log" | sed -nE 's/.*: ([0-9.]+) tok\/s$/\1/p' | tail -1)
  echo "  $sc round $rd $sys: ${tps:-failed} tok/s$(echo "$log" | sed -nE 's/.* s( \(prefill .*\)): [0-9.]+ tok\/s$/\1/p' | tail -1)"
  printf '%s\t%s\t%s\t%s\t%s\tpy\n' "$sc" "$sys" "$rd" "${tps:-0}" "$out" >> "$RES"
}
for scn in $SCENARIOS; do
  IFS=: read -r sc NP PL GL BLK <<< "$scn"
  [ -f "$HF/prompts-$sc.jsonl" ] ||
    "$PY" "$PEERS" prompts "$HF" --tag "$sc" --prompts "$NP" --prompt-len "$PL" \
          --text "$ROOT/data/austen/persuasion.txt"
  echo "peers: $sc: $NP prompts of $PL tokens, $GL new, fg block $BLK, $THREADS threads"
  for rd in $(seq "${FIRST_ROUND:-1}" $(( ${FIRST_ROUND:-1} + ROUNDS - 1 ))); do
    for sys in $SYSTEMS; do
      o=$WORK/out-$sc-$sys-$rd.json
      case $sys in
      fg-F16) fg_run "$sc" "$rd" "$sys" "$o" fg-f16 "$BLK" ;;
      fg-F16-bf16) fg_run "$sc" "$rd" "$sys" "$o" fg-f16 "$BLK" --compute bf16 ;;
      fg-F16-disk) fg_run "$sc" "$rd" "$sys" "$o" fg-f16 "$BLK" --percent 0 0 0 100 0 100 ;;
      fg-Q4-int8) fg_run "$sc" "$rd" "$sys" "$o" fg-q4a1 "$BLK" --compute int8 ;;
      fg-Q8-int8) fg_run "$sc" "$rd" "$sys" "$o" fg-q8a1 "$BLK" --compute int8 ;;
      fg-Q4-f32) fg_run "$sc" "$rd" "$sys" "$o" fg-q4a0 "$BLK" ;;
      ct2-float32) py_run "$sc" "$rd" "$sys" "$o" ct2 --ct2-dir "$WORK/ct2" --compute float32 ;;
      ct2-int8) py_run "$sc" "$rd" "$sys" "$o" ct2 --ct2-dir "$WORK/ct2" --compute int8 ;;
      hf-float32) [ "$rd" -le "${HF_ROUNDS:-2}" ] && py_run "$sc" "$rd" "$sys" "$o" hf ;; # slow
      *) echo "peers: unknown system $sys" >&2; exit 2 ;;
      esac
    done
  done
done
"$PY" "$PEERS" report "$WORK" --out "$RES"
}
[ "${OPT:-1}" = 0 ] || opt_part
[ "${LLAMACPP:-1}" = 0 ] || . "$ROOT/bench/peers_llamacpp.sh"
