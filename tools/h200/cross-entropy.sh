#!/usr/bin/env bash
# cross-entropy PART [OUTDIR]: the Triton cross-entropy: tests, attention, profiles, variants, peers (parts 1, 2, 3).
# On the lent H200 (no network, torch and triton from the image, .whl carried): the Triton
# cross-entropy's measurements, in calls of under 10 minutes each (results are written as each step ends):
#   part 1: the Triton cross-entropy's GPU tests; benchmarks/attention.py (SDPA backends and
#           layouts at head dim 64); profile_update.py at 20m@512x1 (kernels per update) with
#           the default and the Triton cross-entropy; variants.py baseline/repeat/ce-triton at
#           20m@512x1 and 250m@2048x16;
#   part 2: the kernel's GPU tests again (after a rounding change), the 20m@512x1 profiles, and
#           variants.py baseline/repeat/ce-triton at 250m@2048x16, 500m@2048x16, 250m@4096x8;
#   part 3: profile_update.py at 250m@2048x16 with each cross-entropy (bytes per kernel
#           against copy speed), then benchmarks/peers.py at the four target points with
#           ours running the Triton cross-entropy (a point cut short by the time limit is lost).
# Usage: tools/h200.sh cross-entropy PART [OUTDIR]      (default $OUT; stops itself after ~540 s)
set -uo pipefail
part=${1:?part: 1, 2 or 3}
out=${2:-${OUT:?output folder: an argument or \$OUT}}
source "$(dirname "$0")/lib.sh"
prepare_gpu
deadline 540
case $part in
1)
  run pytest python3 -m pytest packages/tiny-llm/tests/test_triton_kernels.py packages/tiny-llm/tests/test_variants.py \
    -m cuda -k "cross_entropy" -q -p no:cacheprovider
  run attention python3 $B/attention.py --output "$out/attention.json"
  run profile-20m python3 $B/profile_update.py --point 20m@512x1 --output "$out/profile-20m-c512-b1.json"
  run profile-20m-ce python3 $B/profile_update.py --point 20m@512x1 --kernel cross_entropy=triton \
    --output "$out/profile-20m-c512-b1-ce-triton.json"
  run variants python3 $B/variants.py --quick --points 20m@512x1 250m@2048x16 --cases baseline repeat ce-triton \
    --budget-seconds "$(left)" --output "$out/variants-20m-250m.json"
  ;;
2)
  run pytest python3 -m pytest packages/tiny-llm/tests/test_triton_kernels.py -m cuda -k cross_entropy -q -p no:cacheprovider
  run profile-20m python3 $B/profile_update.py --point 20m@512x1 --output "$out/profile-20m-c512-b1.json"
  run profile-20m-ce python3 $B/profile_update.py --point 20m@512x1 --kernel cross_entropy=triton \
    --output "$out/profile-20m-c512-b1-ce-triton.json"
  run variants python3 $B/variants.py --quick --points 250m@2048x16 500m@2048x16 250m@4096x8 \
    --cases baseline repeat ce-triton --budget-seconds "$(left)" --output "$out/variants-250m-500m-250m4096.json"
  ;;
3)
  run profile-250m python3 $B/profile_update.py --point 250m@2048x16 --output "$out/profile-250m-c2048-b16.json"
  run profile-250m-ce python3 $B/profile_update.py --point 250m@2048x16 --kernel cross_entropy=triton \
    --output "$out/profile-250m-c2048-b16-ce-triton.json"
  run peers python3 $B/peers.py --quick --no-peer-b --kernel cross_entropy=triton \
    --points 250m@2048x16 20m@512x1 500m@2048x16 250m@4096x8 --output "$out/peers-targets-ce-triton.json"
  ;;
esac
grep -v '^\s*$' "$out/log.txt" | tail -n 60
