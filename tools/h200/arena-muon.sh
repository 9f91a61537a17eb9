#!/usr/bin/env bash
# arena-muon [OUTDIR [BUDGET [ARGS...]]]: ArenaMuon against ArenaAdamW inside the worker's captured update (issue 44).
# On the lent GPU, one call: the GPU tests of Muon in the update (graph equals eager, 200 updates
# lower the loss), then benchmarks/muon_update.py at 250m@2048x16 and 500m@2048x16 in one
# process: per optimizer (adamw, muon, adamw again, muon again) the update's time per graph
# replay, the optimizer step inside it (the timing events), the step alone, Muon's floor
# (Newton-Schulz at the measured matrix ceiling plus its bytes) and the peak memory, as JSON.
# Usage: tools/h200.sh arena-muon [OUTDIR [BUDGET [ARGS...]]]   (default $OUT, 420 s: no new
# case after BUDGET; ARGS go to muon_update.py, e.g. --points 250m@2048x16 --optimizers adamw muon)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
out=${1:-${OUT:?output folder}} budget=${2:-420}
prepare_gpu && commit_txt "$out"
commands=$out/command.txt && echo "tools/h200.sh arena-muon $*" > "$commands"
deadline $((budget + 150))  # the last case started before BUDGET still compiles and runs
run_apart pytest-cuda-muon python3 -m pytest -q -m cuda $T/test_cuda_muon.py
run_apart muon-update python3 $B/muon_update.py --budget-seconds "$budget" --output "$out/muon-update.json" "${@:3}"
cat "$out/pytest-cuda-muon.txt" "$out/muon-update.txt"
