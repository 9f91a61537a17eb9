#!/usr/bin/env bash
# On the lent H200 (no network, torch and triton from the image, .whl carried): issue 20
# part 1, ArenaAdamW's "triton" kernel against "fused", in one call (part 2's profile is
# benchmarks/profile_update.py; its figures are in benchmarks/results/h200-20261130-elementwise).
#   1. the CUDA tests of the triton kernel (against fused and tensor, bitwise determinism,
#      graph capture, the kernel inside the complete-update graph) and fused's own test;
#   2. benchmarks/peers.py --optimizer-only: ArenaAdamW.step alone per kernel, interleaved
#      in one process, against its floor (32 B/parameter at the copy bandwidth measured
#      first) at 20m, 90m, 250m, 500m; also the triton kernel at other update block sizes;
#   3. with the time left: benchmarks/variants.py at 20m@512x8, where the optimizer's share
#      of the update is largest (baseline, repeat, opt-triton): the whole update with the
#      triton kernel, equality and tokens/s (a case starts only with 60 s left).
# Usage: tools/h200-optimizer-kernels.sh [OUTDIR]   (default $OUT; stops itself after ~480 s)
set -uo pipefail
out=${1:-${OUT:?output folder}}
cd "$(dirname "$0")/.."
source tools/gpu-env.sh
mkdir -p "$out"
echo "tools/h200-optimizer-kernels.sh $*" > "$out/command.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
git_rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown); echo "commit $git_rev (plus working tree)" > "$out/commit.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a "$out/gpu.txt"
end=$((SECONDS + 480))
left() { echo $((end - SECONDS > 1 ? end - SECONDS : 1)); }
run() {  # name, then the command: its line in command.txt, its output in NAME.txt
  local name=$1; shift
  printf '%q ' "$@" >> "$out/command.txt"; echo >> "$out/command.txt"
  timeout "$(left)" "$@" > "$out/$name.txt" 2>&1; echo "$name: exit $?" | tee -a "$out/command.txt"
}

t=packages/tiny-llm/tests
run pytest-cuda python3 -m pytest "$t/test_triton_adamw.py" "$t/test_variants.py" "$t/test_cuda.py" -m cuda \
  -k "triton or (fast_arena_kernels and fused)" -q -p no:cacheprovider -rs
run peers-optimizer-kernels python3 packages/tiny-llm/benchmarks/peers.py --optimizer-only \
  --optimizer-kernels fused triton --triton-blocks 512 2048 4096 \
  --points 20m@512x8 90m@1024x32 250m@2048x16 500m@2048x16 --output "$out/peers-optimizer-kernels.json"
run variants-20m python3 packages/tiny-llm/benchmarks/variants.py --quick --points 20m@512x8 \
  --cases baseline repeat opt-triton --budget-seconds "$(( $(left) > 60 ? $(left) - 60 : 1 ))" \
  --output "$out/variants-20m-opt-triton.json"
tail -n 4 "$out"/pytest-cuda.txt; grep -h "ArenaAdamW.step\|copy" "$out"/peers-optimizer-kernels.txt
tail -n 8 "$out"/variants-20m.txt
