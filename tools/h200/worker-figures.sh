#!/usr/bin/env bash
# worker-figures OUTDIR: the guide's point command, the worker's GPU tests, peers and variants.
# On the lent H200 machine (no network, torch from the image, .whl carried): the worker's
# figures (docs/performance.md), in one call.
#   GPU 0: the guide's individual-point command verbatim (10 s windows), the GPU tests of
#          the worker and its speed variants, then benchmarks/peers.py (ours against peer A
#          in the same process) for 500m@2048x16 and 250m@4096x8;
#   GPU 1: benchmarks/variants.py at 250m@2048x16 (every default case), then 500m@2048x16
#          (baseline and the compiled optimizer).
# With one GPU the two halves run one after the other (about twice as long).
# Usage: tools/h200.sh worker-figures OUTDIR      (each half stops itself after ~540 s)
set -uo pipefail
out=${1:?output folder}
source "$(dirname "$0")/lib.sh"
prepare_gpu
mkdir -p runs
commit_txt "$out"
ngpu=$(python3 -c 'import torch; print(torch.cuda.device_count())')
deadline 540

half0() {
  run_apart guide-command python3 -m tiny_llm benchmark-throughput-worker --config configs/250m.yaml \
    --set model.context_length=2048 --set training.micro_batch_size=8 --set training.batch_tokens=16384 \
    --set optimizer.lr=0.001 --set optimizer.beta2=0.99 --output runs/throughput-point.json \
    --warmup 20 --windows 5 --window-seconds 10
  cp runs/throughput-point.json "$out/" 2>/dev/null
  run_apart pytest-cuda python3 -m pytest packages/tiny-llm -m cuda -q -p no:cacheprovider -k "not guide_command"
  run_apart peers python3 $B/peers.py --quick --no-peer-b \
    --points 500m@2048x16 250m@4096x8 --output "$out/peers-500m-250m4096.json"
}
half1() {
  run_apart variants-250m python3 $B/variants.py --quick --points 250m@2048x16 \
    --cases baseline opt-compiled ce-chunked attn-flash inductor-cd best --budget-seconds 380 \
    --output "$out/variants-250m.json"
  run_apart variants-500m python3 $B/variants.py --quick --points 500m@2048x16 \
    --cases baseline opt-compiled --budget-seconds 60 \
    --output "$out/variants-500m.json"
}
if [ "$ngpu" -ge 2 ]; then
  CUDA_VISIBLE_DEVICES=0 half0 & CUDA_VISIBLE_DEVICES=1 half1 & wait
else
  deadline 1080; half0; half1
fi
tail -n 5 "$out"/*.txt
