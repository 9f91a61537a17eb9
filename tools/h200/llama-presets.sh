#!/usr/bin/env bash
# llama-presets PART [OUTDIR [SECONDS [BASE]]]: the small Llama family's presets, and 250m against BASE.
# On the lent H200 (no network, torch, triton and transformers from the image, .whl carried):
# the GPU checks and measurements of the small Llama family, in calls of under 10 minutes
# (results are written as each step ends, and a step cut short by the deadline loses only itself):
#   part 1: the GPU test of the captured update's loss against transformers (SmolLM2-135M and
#           Qwen3-0.6B shapes); benchmarks/attention.py on the presets' grouped-query shapes
#           (which SDPA backend runs with enable_gqa, and what repeating k and v would cost);
#           benchmarks/peers.py, one process per point, at smollm2-360m@2048x16,
#           qwen2.5-0.5b@2048x16 and llama-3.2-1b@2048x8: ours, peer A and peer B;
#   part 2: 250m@2048x16, ours, from this tree and from BASE (a copy of the code before the
#           knobs, with its own peers.py: ours and peer A), alternated, twice each while time is
#           left: a repeat of the same code is the yardstick for "not slower".
# Usage: tools/h200.sh llama-presets PART [OUTDIR [SECONDS [BASE]]]   (default $OUT, 520 s, build/i32-base)
set -uo pipefail
part=${1:?part: 1 or 2}
out=${2:-${OUT:?output folder: an argument or \$OUT}}
seconds=${3:-520}
base=${4:-build/i32-base}
source "$(dirname "$0")/lib.sh"
prepare_gpu
python3 -c 'import torch, transformers, triton; print("torch", torch.__version__, "transformers", transformers.__version__, "triton", triton.__version__, "cudnn", torch.backends.cudnn.version())' | tee -a "$out/gpu.txt"
deadline "$seconds"
case $part in
1)
  run pytest timeout 200 python3 -m pytest $T/test_cuda_transformers.py -m cuda -q -s -p no:cacheprovider
  run attention python3 $B/attention.py --gqa 15:5:64 14:2:64 32:8:64 16:8:128 --contexts 2048 --layouts model \
    --backends auto repeat flash cudnn efficient --reps 5 --output "$out/attention-gqa.json"
  for point in smollm2-360m@2048x16 qwen2.5-0.5b@2048x16 llama-3.2-1b@2048x8; do
    run "peers $point" python3 $B/peers.py --quick --points "$point" --output "$out/peers-${point//@/-}.json"
  done
  ;;
2)
  for round in 1 2; do
    run "peers 250m this tree, round $round" python3 $B/peers.py --quick --cases ours --points 250m@2048x16 \
      --output "$out/peers-250m-c2048x16-knobs-$round.json"
    run "peers 250m base, round $round" python3 "$base/$B/peers.py" --quick --no-peer-b --points 250m@2048x16 \
      --output "$out/peers-250m-c2048x16-base-$round.json"
  done
  ;;
esac
grep -v '^\s*$' "$out/log.txt" | grep -v '^SKIPPED' | tail -n 60
