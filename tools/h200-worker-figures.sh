#!/usr/bin/env bash
# On the lent H200 machine (no network, torch from the image, .whl carried): the worker's
# figures for the worker and performance issues, in one call.
#   GPU 0: the guide's individual-point command verbatim (10 s windows), the GPU tests of
#          the worker and its speed variants, then benchmarks/peers.py (ours against peer A
#          in the same process) for 500m@2048x16 and 250m@4096x8;
#   GPU 1: benchmarks/variants.py at 250m@2048x16 (every default case), then 500m@2048x16
#          (baseline and the compiled optimizer).
# With one GPU the two halves run one after the other (about twice as long).
# Usage: tools/h200-worker-figures.sh OUTDIR      (each half stops itself after ~540 s)
set -uo pipefail
out=${1:?output folder}
cd "$(dirname "$0")/.."
source tools/gpu-env.sh
mkdir -p "$out" runs
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
git_rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown); echo "commit $git_rev (plus working tree)" > "$out/commit.txt"
ngpu=$(python3 -c 'import torch; print(torch.cuda.device_count())')
end=$((SECONDS + 540))
left() { echo $((end - SECONDS > 1 ? end - SECONDS : 1)); }

half0() {
  timeout "$(left)" python3 -m tiny_llm benchmark-throughput-worker --config configs/250m.yaml \
    --set model.context_length=2048 --set training.micro_batch_size=8 --set training.batch_tokens=16384 \
    --set optimizer.lr=0.001 --set optimizer.beta2=0.99 --output runs/throughput-point.json \
    --warmup 20 --windows 5 --window-seconds 10 > "$out/guide-command.txt" 2>&1
  cp runs/throughput-point.json "$out/" 2>/dev/null
  timeout "$(left)" python3 -m pytest packages/tiny-llm -m cuda -q -p no:cacheprovider -k "not guide_command" \
    > "$out/pytest-cuda.txt" 2>&1
  timeout "$(left)" python3 packages/tiny-llm/benchmarks/peers.py --quick --no-peer-b \
    --points 500m@2048x16 250m@4096x8 --output "$out/peers-500m-250m4096.json" > "$out/peers.txt" 2>&1
}
half1() {
  timeout "$(left)" python3 packages/tiny-llm/benchmarks/variants.py --quick --points 250m@2048x16 \
    --cases baseline opt-compiled ce-chunked attn-flash inductor-cd best --budget-seconds 380 \
    --output "$out/variants-250m.json" > "$out/variants-250m.txt" 2>&1
  timeout "$(left)" python3 packages/tiny-llm/benchmarks/variants.py --quick --points 500m@2048x16 \
    --cases baseline opt-compiled --budget-seconds 60 \
    --output "$out/variants-500m.json" > "$out/variants-500m.txt" 2>&1
}
if [ "$ngpu" -ge 2 ]; then
  CUDA_VISIBLE_DEVICES=0 half0 & CUDA_VISIBLE_DEVICES=1 half1 & wait
else
  end=$((SECONDS + 1080)); half0; half1
fi
tail -n 5 "$out"/*.txt
