#!/usr/bin/env bash
# optimizer-timing OUTDIR [WINDOW_SECONDS]: the GPU tests, then baseline and instrumented workers.
# On the lent H200 (no network, torch from the image): the GPU tests, then optimizer
# timing for 250m and 500m at context 2048, batch 16: an uninstrumented baseline and the
# instrumented worker, each a fresh process, as a campaign allocation runs them.
# Usage: tools/h200.sh optimizer-timing OUTDIR [WINDOW_SECONDS]
set -uo pipefail
out=${1:?output folder}; win=${2:-10}
source "$(dirname "$0")/lib.sh"
prepare_gpu
timeout 300 python3 -m pytest packages/tiny-llm -m cuda -q -p no:cacheprovider 2>&1 | tail -15 | tee "$out/pytest-cuda.txt"
for model in 250m 500m; do
  common=(--config "configs/$model.yaml" --set model.context_length=2048 --set training.micro_batch_size=16
          --set training.batch_tokens=32768 --warmup 20 --windows 5 --window-seconds "$win")
  python3 -m tiny_llm benchmark-throughput-worker "${common[@]}" --output "$out/$model-c2048-b16-baseline.json" | tail -3
  python3 -m tiny_llm benchmark-throughput-worker "${common[@]}" --optimizer-timing --output "$out/$model-c2048-b16-timing.json" | tail -3
done
