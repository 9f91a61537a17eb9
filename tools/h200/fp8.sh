#!/usr/bin/env bash
# fp8 [OUTDIR [BUDGET [PEERS ARGS...]]]: BF16 against torchao's FP8 linears (tensorwise, rowwise), ours and peer A (issue 43).
# On the lent GPU (no network, torch from the image): the carried wheels in .whl/ must include
# torchao-0.18.0-cp310-abi3-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl (the x86_64 wheel
# uv.lock pins; torchao-0.18.0-py3-none-any.whl serves too) beside msgspec's: tools/gpu-env.sh
# installs every .whl/*.whl with `pip install --no-index --no-deps --target /tmp/site`.
# One process (benchmarks/peers.py --precisions bf16 fp8-tensorwise fp8-rowwise --cases ours
# peer_a): per point and precision, tokens/s, BF16-equivalent MFU, peak allocated and reserved
# memory, the first loss and the FP8 linears converted, into OUTDIR/peers-fp8.json; the first
# point is the issue's target (llama-3.2-1b@2048x8), the cheaper ones follow while BUDGET lasts
# (no case starts after it; each case compiles anew, about 50 to 110 s). Then, where time is
# left, the GPU tests of FP8 (tests/test_cuda_fp8.py: 400 updates reach BF16's loss within 1%, FP8
# inside the captured graph) and the worker's own result at FP8 (the guide's command, 1B).
# A call is at most 10 minutes: llama-3.2-1b's six cases take most of one. Usage:
#   tools/h200.sh fp8 OUT1                                      # llama-3.2-1b@2048x8, then what time allows
#   tools/h200.sh fp8 OUT2 420 --points 250m@2048x16 qwen2.5-0.5b@2048x16 500m@2048x16
#   tools/h200.sh fp8 OUT3 420 --points                          # no point: the GPU tests and the worker
# (default OUTDIR $OUT, BUDGET 420 s; PEERS ARGS replace the points)
set -uo pipefail
out=${1:-${OUT:?output folder}}
budget=${2:-420}
peers_args=("${@:3}")
[ ${#peers_args[@]} -gt 0 ] || peers_args=(--points llama-3.2-1b@2048x8 250m@2048x16)
source "$(dirname "$0")/lib.sh"
prepare_gpu
commands=$out/command.txt
echo "tools/h200.sh fp8 $*" > "$commands"
commit_txt "$out"
python3 -c 'import torch, torchao; print("torch", torch.__version__, "torchao", torchao.__version__, "sm", torch.cuda.get_device_capability())' 2>&1 | tail -1 | tee -a "$out/gpu.txt"
deadline $((budget + 150))  # the last case started before BUDGET may still compile and run

run_apart peers-fp8 python3 $B/peers.py --output "$out/peers-fp8.json" --quick --budget-seconds "$budget" \
  --precisions bf16 fp8-tensorwise fp8-rowwise --cases ours peer_a "${peers_args[@]}"
grep -E "tok/s|FAILED" "$out/peers-fp8.txt"
if [ "$(left)" -gt 240 ]; then
  run_apart cuda-fp8-tests python3 -m pytest -q -p no:cacheprovider -m cuda $T/test_cuda_fp8.py
  tail -3 "$out/cuda-fp8-tests.txt"
fi
if [ "$(left)" -gt 150 ]; then
  # shellcheck disable=SC2046
  run_apart worker-fp8 python3 -m tiny_llm benchmark-throughput-worker $(point llama-3.2-1b 2048 8) \
    --precision fp8-tensorwise --output "$out/worker-fp8-tensorwise.json"
  tail -1 "$out/worker-fp8.txt"
fi
