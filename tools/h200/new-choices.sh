#!/usr/bin/env bash
# new-choices [OUTDIR [SECONDS]]: the GPU tests of FP8, Muon and Gemma 3 (issues 43, 44, 48), one file at a time.
# On the lent GPU, one call: tools/gpu-env.sh installs the carried wheels (.whl/: msgspec, pypdf,
# torchao); where FlashAttention-4 was installed on this machine by `fa4` part b or tests, the
# Gemma 3 presets run their windowed layers with it (the model's default attention).
# Per test file, its output in OUTDIR/<file>.txt and its command and exit status in
# OUTDIR/command.txt; files run while SECONDS (default 540) last:
#   test_cuda_fp8.py          400 updates at each FP8 recipe reach BF16's loss within 1%; FP8 in the captured graph
#   test_cuda_muon.py         ArenaMuon's captured update equals its eager one; 200 updates lower the loss
#   test_cuda_transformers.py the first captured update's loss equals transformers' (Gemma 3 presets among them)
# then, where 150 s are left, the guide's worker command (250m@2048x8, 10 s windows) into
# OUTDIR/guide-command.json: its setup split into phases (issue 45's first measurement).
# Usage: tools/h200.sh new-choices [OUTDIR [SECONDS]]   (default $OUT, 540 s)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
out=${1:-${OUT:?output folder}} seconds=${2:-540}
prepare_gpu && commit_txt "$out"
commands=$out/command.txt && echo "tools/h200.sh new-choices $*" > "$commands"
deadline "$seconds"
for f in test_cuda_muon.py test_cuda_transformers.py test_cuda_fp8.py; do
  [ "$(left)" -gt 30 ] || { echo "${f%.py}: not run, out of time" | tee -a "$commands"; continue; }
  run_apart "${f%.py}" python3 -m pytest -q -p no:cacheprovider -m cuda -rs "$T/$f"
  tail -3 "$out/${f%.py}.txt"
done
if [ "$(left)" -gt 150 ]; then
  run_apart guide-command python3 -m tiny_llm benchmark-throughput-worker $(point 250m 2048 8) \
    --output "$out/guide-command.json" --warmup 20 --windows 5 --window-seconds 10
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("setup", r["setup_seconds"], r["setup_phases"], "startup", r["startup_seconds"])' "$out/guide-command.json"
fi
