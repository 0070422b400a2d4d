# bench/peers_llamacpp.sh - llama.cpp's column of bench/peers.sh (issue 43); sourced by it, with
# ROOT, BIN, WORK, PY, PEERS, ROUNDS, THREADS set there. Its header comment says what runs.
{ read -r LC_BIN; read -r LC_SRC; } < <("$ROOT/bench/llamacpp.sh")
LH=$WORK/llama-hf
if [ ! -f "$LH/model.safetensors" ] && [ ! -f "$LH/model.safetensors.index.json" ]; then
  "$PY" "$PEERS" make-llama "$LH" --tokenizer "$ROOT/data/gpt2-tokenizer" --hidden 2048 \
    --layers 22 --heads 32 --kv-heads 4 --ffn 5632 ${LLAMA_SHAPE:-}
fi
if [ ! -f "$WORK/llama-f16.gguf" ]; then
  PYTHONPATH="$LC_SRC/gguf-py" "$PY" "$PEERS" gguf "$LC_SRC/convert_hf_to_gguf.py" "$LH" --outtype f16 \
    --outfile "$WORK/llama-f16.gguf.part" >/dev/null
  mv "$WORK/llama-f16.gguf.part" "$WORK/llama-f16.gguf"
fi
for q in Q4_0 Q8_0; do
  [ -f "$WORK/llama-$q.gguf" ] ||
    "$LC_BIN/llama-quantize" "$WORK/llama-f16.gguf" "$WORK/llama-$q.gguf" "$q" "$THREADS" >/dev/null 2>&1
done
[ -d "$WORK/llama-fg-f16" ] || "$BIN/fg-convert" "$LH" -o "$WORK/llama-fg-f16" --quiet
[ -d "$WORK/llama-fg-q4a1" ] ||
  "$BIN/fg-convert" "$WORK/llama-fg-f16" -o "$WORK/llama-fg-q4a1" --compress-weight --group-axis 1 --quiet
[ -d "$WORK/llama-fg-q8a1" ] ||
  "$BIN/fg-convert" "$WORK/llama-fg-f16" -o "$WORK/llama-fg-q8a1" --weight-bits 8 --group-axis 1 --quiet
echo "peers: llama.cpp $(git -C "$LC_SRC" describe 2>/dev/null || basename "$(dirname "$(dirname "$LC_SRC")")"),"\
     "TinyLlama-1.1B shape, random weights: F16 GGUF $(stat -c %s "$WORK/llama-f16.gguf") bytes," \
     "Q4_0 $(stat -c %s "$WORK/llama-Q4_0.gguf"), fg F16 store $(du -sb "$WORK/llama-fg-f16" | cut -f1)"
LRES=${LRES:-$WORK/llama.tsv}
[ -n "${APPEND:-}" ] || : > "$LRES"
# one row: scenario system round tok/s prefill-prompt-tok/s decode-tok/s; printed with the
# process's CPU seconds (user + system, loading included) and the load average: on a machine
# shared with other work the wall-clock rates measure the share each run got
CPUF=$(mktemp)
lrow() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$LRES"
         printf '  %s %s round %s: %s tok/s (prefill %s prompt tok/s, decode %s tok/s); %s CPU s, load %s\n' \
                "$@" "$(awk '{ printf "%.1f", $1 + $2 }' "$CPUF")" "$(cut -d' ' -f1 /proc/loadavg)"; }
TIME=(/usr/bin/time -f "%U %S" -o "$CPUF")
lfg() { # sc rd sys store flags...
  local log tot pre dec
  # the store read once first, so its pages are in the page cache as the peers' mmapped GGUFs
  # are after their untimed load (fg's prefill reads the weights it runs)
  find "$WORK/$4" -type f -exec cat {} + > /dev/null
  log=$("${TIME[@]}" "$BIN/fg-infer" -m "$WORK/$4" --prompt-len "$PL" --gen-len "$GL" --threads "$THREADS" \
        --gpu-batch-size "${BLK%x*}" --num-gpu-batches "${BLK#*x}" ${FG_WARMUP---warmup} "${@:5}" 2>&1 >/dev/null) ||
    echo "peers: $3: $log" >&2
  tot=$(echo "$log" | sed -nE 's/^summary: .*: ([0-9.]+) tok\/s$/\1/p')
  pre=$(echo "$log" | sed -nE 's/^summary: .*\(prefill ([0-9.]+) s, decode ([0-9.]+) s\).*/\1/p')
  dec=$(echo "$log" | sed -nE 's/^summary: .*\(prefill ([0-9.]+) s, decode ([0-9.]+) s\).*/\2/p')
  lrow "$1" "$3" "$2" "${tot:-0}" "$(awk -v n="$NP" -v p="$PL" -v t="${pre:-0}" 'BEGIN { printf "%.2f", (t > 0 ? n * p / t : 0) }')" \
       "$(awk -v n="$NP" -v g="$GL" -v t="${dec:-0}" 'BEGIN { printf "%.2f", (t > 0 ? n * (g - 1) / t : 0) }')"
}
llc() { # sc rd sys gguf
  local out
  if [ "$NP" -gt 1 ]; then
    out=$("${TIME[@]}" "$LC_BIN/llama-batched-bench" -m "$WORK/$4" -c $((NP * (PL + GL))) -b 2048 -ub 512 \
          -npp "$PL" -ntg $((GL - 1)) -npl "$NP" -t "$THREADS" --output-format jsonl 2>/dev/null |
          grep '^{' | tail -1)
    lrow "$1" "$3" "$2" $(echo "$out" | "$PY" -c '
import json, sys
r = json.loads(sys.stdin.read())
print("%.2f %.2f %.2f" % (r["pl"] * (r["tg"] + 1) / r["t"], r["speed_pp"], r["speed_tg"]))')
  else
    out=$("${TIME[@]}" "$LC_BIN/llama-bench" -m "$WORK/$4" -p "$PL" -n "$GL" -t "$THREADS" -r 1 -o jsonl 2>/dev/null)
    lrow "$1" "$3" "$2" $(echo "$out" | PL="$PL" GL="$GL" "$PY" -c '
import json, os, sys
r = [json.loads(l) for l in sys.stdin if l.startswith("{")]
pp = [float(x["avg_ts"]) for x in r if int(x["n_prompt"]) > 0][0]
tg = [float(x["avg_ts"]) for x in r if int(x["n_gen"]) > 0][0]
pl, gl = int(os.environ["PL"]), int(os.environ["GL"])
print("%.2f %.2f %.2f" % (gl / (pl / pp + (gl - 1) / tg), pp, tg))')
  fi
}
LSYS=${LLAMA_SYSTEMS:-"fg-F16 llama.cpp-F16 fg-Q4-int8 llama.cpp-Q4_0"}
for scn in ${LLAMA_SCENARIOS:-"b32:32:128:32:8x4 b1:1:128:32:1x1"}; do
  IFS=: read -r sc NP PL GL BLK <<< "$scn"
  echo "peers: llama $sc: $NP prompts of $PL tokens, $GL new, fg block $BLK, $THREADS threads;" \
       "load average $(cut -d' ' -f1-3 /proc/loadavg)"
  for rd in $(seq "${FIRST_ROUND:-1}" $(( ${FIRST_ROUND:-1} + ROUNDS - 1 ))); do
    for sys in $LSYS; do
      case $sys in
      fg-F16) lfg "$sc" "$rd" "$sys" llama-fg-f16 ;;
      fg-F16-bf16) lfg "$sc" "$rd" "$sys" llama-fg-f16 --compute bf16 ;;
      fg-Q4-int8) lfg "$sc" "$rd" "$sys" llama-fg-q4a1 --compute int8 ;;
      fg-Q8-int8) lfg "$sc" "$rd" "$sys" llama-fg-q8a1 --compute int8 ;;
      llama.cpp-F16) llc "$sc" "$rd" "$sys" llama-f16.gguf ;;
      llama.cpp-Q4_0) llc "$sc" "$rd" "$sys" llama-Q4_0.gguf ;;
      llama.cpp-Q8_0) llc "$sc" "$rd" "$sys" llama-Q8_0.gguf ;;
      *) echo "peers: unknown llama system $sys" >&2; exit 2 ;;
      esac
    done
  done
done
"$PY" - "$LRES" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.count("\t") == 5]
for sc in dict.fromkeys(r[0] for r in rows):
    print(f"\nllama {sc}: means over the rounds (tok/s; prefill in prompt tok/s)")
    print("| system | rounds | tok/s | prefill | decode |")
    print("|---|---:|---:|---:|---:|")
    mean = {}
    for s in dict.fromkeys(r[1] for r in rows if r[0] == sc):
        v = [[float(x) for x in r[3:]] for r in rows if r[0] == sc and r[1] == s]
        v = [x for x in v if x[0] > 0]
        if not v:
            print(f"| {s} | 0 | failed | | |")
            continue
        mean[s] = [sum(c) / len(v) for c in zip(*v)]
        print(f"| {s} | {len(v)} | " + " | ".join(f"{x:.2f}" for x in mean[s]) + " |")
    for fg, lc in (("fg-F16", "llama.cpp-F16"), ("fg-F16-bf16", "llama.cpp-F16"),
                   ("fg-Q4-int8", "llama.cpp-Q4_0"),
                   ("fg-Q8-int8", "llama.cpp-Q8_0")):
        if fg in mean and lc in mean:
            a, b = mean[fg], mean[lc]
            print(f"  {fg} / {lc}: overall {a[0] / b[0]:.2f}, prefill {a[1] / b[1]:.2f}, "
                  f"decode {a[2] / b[2]:.2f}")
EOF
rm -f "$CPUF"
