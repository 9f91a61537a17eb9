#!/usr/bin/env bash
# On the lent H200 (no network): FlashAttention-4 as the model's attention (Kernels(attention="fa4")).
# flash-attn-4's CuTe DSL runtime wheel (92 MB) is larger than one call may carry (64 MiB with the
# working tree), so it travels in two halves, in calls on the same warm machine (ignored folders:
# .fa4a/part.aa and .fa4b/part.ab from `split -b 46000000`, the other wheels in .fa4w/):
#   part a: keep the carried half in /tmp/fa4 (carry .fa4a, then again carrying .fa4b);
#   part b: join the halves, install every wheel into /tmp/site (carry .fa4w), then measure:
#           the GPU tests of the kernel (test_cuda_fa4.py), variants.py's equality yardstick
#           (baseline, repeat, attn-fa4) at 250m@2048x16, and peers.py's "ours" with the
#           default attention and with fa4 at POINTS (default 250m@2048x16 250m@4096x8);
#   part c: peers.py only, default and fa4, at POINTS (a later call on the same machine).
# Usage: tools/h200-fa4.sh PART [OUTDIR [SECONDS [POINTS]]]   (default $OUT, 540 s)
set -uo pipefail
part=${1:?part: a, b or c}
out=${2:-${OUT:?output folder: an argument or \$OUT}}
seconds=${3:-540}
points=${4:-"250m@2048x16 250m@4096x8"}
cd "$(dirname "$0")/.."
mkdir -p "$out"
wheel=/tmp/fa4/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
if [[ $part == a ]]; then
  mkdir -p /tmp/fa4 && cp .fa4[ab]/part.* /tmp/fa4/ && ls -l /tmp/fa4 | tee "$out/part-a.txt"
  exit
fi
source tools/gpu-env.sh
if [[ $part == b ]]; then
  [[ -f /tmp/fa4/part.aa && -f /tmp/fa4/part.ab ]] || { echo "no /tmp/fa4/part.aa and part.ab: the machine was given back since part a; run both part a calls again" >&2; exit 2; }
  cat /tmp/fa4/part.aa /tmp/fa4/part.ab >"$wheel"
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" .fa4w/*.whl || exit 2
fi
# --target skips the .pth file that puts the CuTe DSL on the path.
export PYTHONPATH="/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH"
nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit --format=csv,noheader | tee "$out/gpu.txt"
python3 -c 'import torch, importlib.metadata as m; print("torch", torch.__version__, "flash-attn-4", m.version("flash-attn-4"))' | tee -a "$out/gpu.txt"
end=$((SECONDS + seconds))
left() { echo $((end - SECONDS > 1 ? end - SECONDS : 1)); }
log="$out/log.txt"
# Each command is written beside its output, so the JSON can be committed with how it was made.
run() { local name=$1; shift; echo "== $name: $*" >> "$log"; timeout "$(left)" "$@" >> "$log" 2>&1; echo "== $name rc=$? at ${SECONDS}s" >> "$log"; }
B=packages/tiny-llm/benchmarks
# shellcheck disable=SC2086
peers() {
  run "peers default" python3 $B/peers.py --cases ours --points $points --output "$out/peers-default.json"
  run "peers fa4" python3 $B/peers.py --cases ours --points $points --kernel attention=fa4 --output "$out/peers-fa4.json"
}
if [[ $part == b ]]; then
  run "GPU tests of fa4" timeout 180 python3 -m pytest packages/tiny-llm/tests/test_cuda_fa4.py -q -s -p no:cacheprovider
  run "variants 250m@2048x16" python3 $B/variants.py --quick --points 250m@2048x16 --cases baseline repeat attn-fa4 \
    --budget-seconds 150 --output "$out/variants-fa4.json"
fi
peers
grep -v '^\s*$' "$log" | tail -n 60
