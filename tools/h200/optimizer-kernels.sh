#!/usr/bin/env bash
# optimizer-kernels [OUTDIR]: ArenaAdamW's "triton" kernel against "fused": tests, step alone, variants.
# On the lent H200 (no network, torch and triton from the image, .whl carried): ArenaAdamW's "triton" kernel against "fused", in one call (the profile of the
# whole update is benchmarks/profile_update.py; its figures are in benchmarks/results/h200-20261130-elementwise).
#   1. the CUDA tests of the triton kernel (against fused and tensor, bitwise determinism,
#      graph capture, the kernel inside the complete-update graph) and fused's own test;
#   2. benchmarks/peers.py --optimizer-only: ArenaAdamW.step alone per kernel, interleaved
#      in one process, against its floor (32 B/parameter at the copy bandwidth measured
#      first) at 20m, 90m, 250m, 500m; also the triton kernel at other update block sizes;
#   3. with the time left: benchmarks/variants.py at 20m@512x8, where the optimizer's share
#      of the update is largest (baseline, repeat, opt-triton): the whole update with the
#      triton kernel, equality and tokens/s (a case starts only with 60 s left).
# Usage: tools/h200.sh optimizer-kernels [OUTDIR]   (default $OUT; stops itself after ~480 s)
set -uo pipefail
out=${1:-${OUT:?output folder}}
source "$(dirname "$0")/lib.sh"
prepare_gpu
commands=$out/command.txt
echo "tools/h200.sh optimizer-kernels $*" > "$commands"
commit_txt "$out"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a "$out/gpu.txt"
deadline 480

run_apart pytest-cuda python3 -m pytest "$T/test_triton_adamw.py" "$T/test_variants.py" "$T/test_cuda.py" -m cuda \
  -k "triton or (fast_arena_kernels and fused)" -q -p no:cacheprovider -rs
run_apart peers-optimizer-kernels python3 $B/peers.py --optimizer-only \
  --optimizer-kernels fused triton --triton-blocks 512 2048 4096 \
  --points 20m@512x8 90m@1024x32 250m@2048x16 500m@2048x16 --output "$out/peers-optimizer-kernels.json"
run_apart variants-20m python3 $B/variants.py --quick --points 20m@512x8 \
  --cases baseline repeat opt-triton --budget-seconds "$(( $(left) > 60 ? $(left) - 60 : 1 ))" \
  --output "$out/variants-20m-opt-triton.json"
tail -n 4 "$out"/pytest-cuda.txt; grep -h "ArenaAdamW.step\|copy" "$out"/peers-optimizer-kernels.txt
tail -n 8 "$out"/variants-20m.txt
