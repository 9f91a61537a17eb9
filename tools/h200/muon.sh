#!/usr/bin/env bash
# muon [OUTDIR [BUDGET [PROBE ARGS...]]]: torch.optim.Muon against fused AdamW inside the update (issue 44's probe).
# On the lent GPU (no network, torch from the image, .whl carried for msgspec), one call:
# benchmarks/muon_probe.py at 250m@2048x16, 250m@2048x1 and 500m@2048x16: tokens/s, the update
# and the optimizer step's own time (CUDA events), its share, peak memory and the first losses of
# fused AdamW, Muon over whole hidden matrices, Muon with qkv and gate_up split, and AdamW again
# (drift); before them the matmul and copy ceilings and Newton-Schulz alone per model (torch's
# loop against one batched product per shape in a CUDA graph). One process: each model is
# compiled once per point and every optimizer starts from the same weights, so the compile
# (about 45 s a point) is paid three times, not twelve.
# Usage: tools/h200.sh muon [OUTDIR [BUDGET [PROBE ARGS...]]]   (default $OUT, 480 s: no new case
# after BUDGET; PROBE ARGS go to muon_probe.py, e.g. --points 250m@2048x1 --optimizers ...)
set -uo pipefail
out=${1:-${OUT:?output folder}}
budget=${2:-480}
probe_args=("${@:3}")
source "$(dirname "$0")/lib.sh"
prepare_gpu
commands=$out/command.txt
echo "tools/h200.sh muon $*" > "$commands"
commit_txt "$out"
python3 -c 'import torch; print("torch", torch.__version__, "Muon", hasattr(torch.optim, "Muon"))' | tee -a "$out/gpu.txt"
deadline $((budget + 90))  # the last case started before BUDGET may still run a point's length

run_apart muon-probe python3 $B/muon_probe.py --budget-seconds "$budget" --output "$out/muon-probe.json" "${probe_args[@]}"
cat "$out/muon-probe.txt"
