#!/usr/bin/env bash
# kernel KERNEL [OUTDIR [SECONDS [POINTS]]]: one Triton kernel's tests, variants and profile.
# On the lent H200 (no network, torch and triton from the image, .whl carried): one Triton kernel
# of tiny_llm (a `Kernels` field set to "triton": norm, rope, ...), in one call:
#   its GPU tests (test_triton_kernels.py and test_variants.py -m cuda -k KERNEL); variants.py
#   baseline/repeat/KERNEL-triton at each point (equality against the rebuilt baseline's drift,
#   and speed); then, while time is left, profile_update.py at 20m@512x1 with the kernel (bytes
#   per kernel, kernels per update).
# Usage: tools/h200.sh kernel KERNEL [OUTDIR [SECONDS [POINTS]]]   (default $OUT, 160 s,
# "250m@2048x16 20m@512x1"; results are written as each step ends, and a step cut short by the
# deadline loses only itself)
set -uo pipefail
kernel=${1:?which kernel: a Kernels field whose choice is "triton" (norm, rope, swiglu, cross_entropy)}
out=${2:-${OUT:?output folder: an argument or \$OUT}}
seconds=${3:-160}
read -r -a points <<< "${4:-250m@2048x16 20m@512x1}"
source "$(dirname "$0")/lib.sh"
source tools/gpu-env.sh
if ! python3 -c 'import sys; from tiny_llm.model import TRITON; sys.exit(sys.argv[1] not in TRITON)' "$kernel"; then
  echo "h200.sh kernel: this tree has no Triton kernel named $kernel in tiny_llm.model.TRITON ($(git log -1 --oneline 2>/dev/null || pwd))" >&2
  exit 3
fi
mkdir -p "$out"
gpu_txt "$out"
deadline "$seconds"
run pytest python3 -m pytest $T/test_triton_kernels.py $T/test_variants.py -m cuda -k "$kernel" -q -p no:cacheprovider
# variants.py starts no case after its budget; the last one it starts may be cut by the deadline.
case=${kernel//_/-}-triton; case=${case/cross-entropy/ce}
run variants python3 $B/variants.py --quick --points "${points[@]}" --cases baseline repeat "$case" \
  --budget-seconds $(($(left) - 25)) --output "$out/variants-$kernel.json"
if (($(left) > 30)); then
  run profile-20m python3 $B/profile_update.py --point 20m@512x1 --kernel "$kernel=triton" \
    --output "$out/profile-20m-c512-b1-$kernel-triton.json"
fi
grep -v '^\s*$' "$out/log.txt" | tail -n 45
