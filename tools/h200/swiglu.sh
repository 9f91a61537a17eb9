#!/usr/bin/env bash
# swiglu [OUTDIR]: the Triton SwiGLU's tests, variants and profile (two GPUs in parallel).
# On the lent H200 (no network, torch and triton from the image, .whl carried): the Triton
# SwiGLU (Kernels(swiglu="triton"), tiny_llm/triton_swiglu.py), in one call of ~6 minutes:
#   1. its GPU tests: the kernels against eager at BF16 and FP32, compiled with fullgraph,
#      and the whole update compiled and captured against the default graph;
#   2. benchmarks/variants.py at 250m@2048x16 and 500m@2048x16: baseline, repeat (the drift
#      the judgement reads against) and swiglu-triton;
#   3. benchmarks/profile_update.py at 250m@2048x16 with the kernel on: its time against the
#      bytes it moves, beside h200-20261130-elementwise (the same point without it).
# With two GPUs, 1 and 3 run on GPU 0 while 2 runs alone on GPU 1.
# Usage: tools/h200.sh swiglu [OUTDIR]      (default $OUT; stops itself after ~560 s)
set -uo pipefail
kernel=swiglu
out=${1:-${OUT:?output folder: an argument or \$OUT}}
source "$(dirname "$0")/lib.sh"
prepare_gpu
commit_txt "$out"
ngpu=$(python3 -c 'import torch; print(torch.cuda.device_count())')
deadline 560

tests() {
  run_apart "pytest-$kernel" python3 -m pytest $T/test_triton_kernels.py \
    $T/test_variants.py -m cuda -k "$kernel" -v -p no:cacheprovider
}
profile() {
  run_apart "profile-250m-$kernel" python3 $B/profile_update.py --point 250m@2048x16 \
    --kernel "$kernel=triton" --output "$out/profile-250m-c2048-b16-$kernel.json"
}
variants() {
  run_apart "variants-$kernel" python3 $B/variants.py --quick \
    --points 250m@2048x16 500m@2048x16 --cases baseline repeat "$kernel-triton" --budget-seconds "$1" \
    --output "$out/variants-$kernel.json"
}
if [ "$ngpu" -ge 2 ]; then
  (export CUDA_VISIBLE_DEVICES=0; tests; profile) & (export CUDA_VISIBLE_DEVICES=1; variants 420) & wait
else
  tests; variants 240; profile
fi
tail -n 12 "$out"/*.txt
