#!/usr/bin/env bash
# On the lent H200 (no network, torch and triton from the image, .whl carried): issue 27's lever 1,
# the Triton residual add + RMSNorm + cast (`Kernels(norm="triton")`), in one call:
#   the kernel's GPU equality tests (test_triton_kernels.py -m cuda -k norm); variants.py
#   baseline/repeat/norm-triton at 250m@2048x16 then 20m@512x1 (equality against the rebuilt
#   baseline's drift, and speed); then, while time is left, profile_update.py at 20m@512x1 with
#   the Triton norm (bytes per kernel, kernels per update).
# Usage: tools/h200-issue27-norm.sh [OUTDIR [SECONDS [POINTS]]]   (default $OUT, 160 s,
# "250m@2048x16 20m@512x1"; results are written as each step ends, and a step cut short by the
# deadline loses only itself)
set -uo pipefail
out=${1:-${OUT:?output folder: an argument or \$OUT}}
seconds=${2:-160}
read -r -a points <<< "${3:-250m@2048x16 20m@512x1}"
cd "$(dirname "$0")/.."
if [[ ! -f packages/tiny-llm/src/tiny_llm/triton_norm.py ]]; then
  echo "h200-issue27-norm.sh: this tree lacks tiny_llm/triton_norm.py ($(git log -1 --oneline 2>/dev/null || pwd))" >&2
  exit 3
fi
source tools/gpu-env.sh
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
end=$((SECONDS + seconds))
left() { echo $((end - SECONDS > 1 ? end - SECONDS : 1)); }
log="$out/log.txt"
# Each command is written beside its output, so the JSON can be committed with how it was made.
run() { local name=$1; shift; echo "== $name: $*" >> "$log"; timeout "$(left)" "$@" >> "$log" 2>&1; echo "== $name rc=$? at ${SECONDS}s" >> "$log"; }
B=packages/tiny-llm/benchmarks
run pytest python3 -m pytest packages/tiny-llm/tests/test_triton_kernels.py -m cuda -k norm -q -p no:cacheprovider
# variants.py starts no case after its budget; the last one it starts may be cut by the deadline.
run variants python3 $B/variants.py --quick --points "${points[@]}" --cases baseline repeat norm-triton \
  --budget-seconds $(($(left) - 25)) --output "$out/variants-norm.json"
if (($(left) > 30)); then
  run profile-20m-norm python3 $B/profile_update.py --point 20m@512x1 --kernel norm=triton \
    --output "$out/profile-20m-c512-b1-norm-triton.json"
fi
grep -v '^\s*$' "$log" | tail -n 45
