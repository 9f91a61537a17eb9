#!/usr/bin/env bash
# fa4 PART [OUTDIR [SECONDS [POINTS]]]: FlashAttention-4 as the model's attention (parts a, b, c, d).
# On the lent H200 (no network): FlashAttention-4 as the model's attention (Kernels(attention="fa4")).
# flash-attn-4's wheels are larger than one call may carry: they travel in parts over calls on one
# warm machine (lib.sh's fa4_keep and fa4_install say how they are split and where they are kept):
#   part a: keep the carried parts in /tmp/fa4 (a call for each of .fa4a, .fa4b, .fa4c, .fa4w);
#   part b: join the parts, install every wheel into /tmp/site (carry .whl), then measure:
#           the GPU tests of the kernel (test_cuda_fa4.py), profiles of the update with the
#           default attention and with fa4 at 250m@2048x16, peers.py's "ours" with each at POINTS
#           (default 250m@2048x16 250m@4096x8), and variants.py's equality yardstick (baseline,
#           repeat, attn-fa4) at 250m@2048x16;
#   part c: peers.py only, the default (auto) and attention=sdpa, at POINTS (installing as part b does
#           where not yet done);
#   part d: variants.py's equality yardstick (as in part b), the guide's worker command with each
#           attention, setup time at 500m@4096x16 with the optimizer-timing worker with each, then
#           the levers on top of fa4 (peers.py with fa4 and the Triton cross-entropy, then with fa4
#           and the Triton norm, at POINTS);
#   part tests: the GPU tests of fa4 (test_cuda_fa4.py) and of the Triton RoPE (test_triton_kernels.py);
#   part levers: at each of POINTS, variants.py's baseline (attention auto: fa4), repeat, and each lever
#           on top of it: rope-triton (RoPE fused with fa4), ce-triton, norm-triton (speed and equality);
#   part profiles: profile_update.py with attention=sdpa and with fa4 at each of POINTS;
#   part small: at each of POINTS (small batches), variants.py's baseline (fa4), repeat and attn-sdpa;
#   part guide: the guide's worker command with the default (auto) and with sdpa, then setup time at
#           500m@4096x16 with the optimizer-timing worker and the default;
#   part gqa-rope: the RoPE kernel's GPU tests (fewer kv heads among them), at each of POINTS
#           variants.py's baseline (fa4, inductor's RoPE on a grouped model), repeat and rope-triton
#           (RoPE fused with fa4), then the fused pair's GPU tests with fewer kv heads.
# Parts other than a install the kept wheels where not yet installed; several parts share one
# call as `tools/h200.sh fa4 tests $OUT S1 && tools/h200.sh fa4 levers $OUT S2 "POINTS"` (log.txt appends).
# Usage: tools/h200.sh fa4 PART [OUTDIR [SECONDS [POINTS]]]   (default $OUT, 540 s)
set -uo pipefail
part=${1:?part: a, b, c, d, tests, levers, profiles, small, guide or gqa-rope}
out=${2:-${OUT:?output folder: an argument or \$OUT}}
seconds=${3:-540}
points=${4:-"250m@2048x16 250m@4096x8"}
source "$(dirname "$0")/lib.sh"
mkdir -p "$out"
if [[ $part == a ]]; then
  fa4_keep | tee "$out/part-a.txt"
  exit
fi
source tools/gpu-env.sh
# Parts b, c and d install the wheels where they are kept and not yet installed on this machine.
fa4_install || exit 2
gpu_txt "$out" power.limit
python3 -c 'import torch, importlib.metadata as m; print("torch", torch.__version__, "flash-attn-4", m.version("flash-attn-4"))' | tee -a "$out/gpu.txt"
deadline "$seconds"
share() {  # REMAINING: variants.py's budget for the next of REMAINING points, leaving a case's time
  local s=$(( ($(left) - 20) / $1 - 60 )); echo $((s > 30 ? s : 30))
}
# shellcheck disable=SC2086
peers() {  # name, then --kernel choices
  local name=$1; shift
  run "peers $name" python3 $B/peers.py --cases ours --points $points "$@" --output "$out/peers-$name.json"
}
case $part in
b)
  run "GPU tests of fa4" timeout 240 python3 -m pytest $T/test_cuda_fa4.py -q -s -p no:cacheprovider
  run "profile default 250m@2048x16" python3 $B/profile_update.py --point 250m@2048x16 --output "$out/profile-default.json"
  run "profile fa4 250m@2048x16" python3 $B/profile_update.py --point 250m@2048x16 --kernel attention=fa4 --output "$out/profile-fa4.json"
  peers default
  peers fa4 --kernel attention=fa4
  run "variants 250m@2048x16" python3 $B/variants.py --quick --points 250m@2048x16 --cases baseline repeat attn-fa4 \
    --budget-seconds 150 --output "$out/variants-fa4.json"
  ;;
c)
  peers default
  peers sdpa --kernel attention=sdpa
  ;;
d)
  run "variants 250m@2048x16" python3 $B/variants.py --quick --points 250m@2048x16 --cases baseline repeat attn-fa4 \
    --budget-seconds 150 --output "$out/variants-fa4.json"
  for attention in auto fa4; do  # the guide's worker command (250m@2048x8, 5 windows of 10 s)
    # shellcheck disable=SC2046
    run "guide worker --attention-backend $attention" python3 -m tiny_llm benchmark-throughput-worker $(point 250m 2048 8) \
      --output "$out/guide-250m-c2048x8-$attention.json" --warmup 20 --windows 5 --window-seconds 10 --attention-backend $attention
  done
  for attention in fa4 auto; do  # setup (compile, capture) of the optimizer-timing worker at 500m@4096x16
    # shellcheck disable=SC2046
    run "optimizer timing 500m@4096x16 --attention-backend $attention" python3 -m tiny_llm benchmark-throughput-worker \
      $(point 500m 4096 16) --optimizer-timing --output "$out/timing-500m-c4096x16-$attention.json" \
      --warmup 5 --windows 2 --window-seconds 5 --attention-backend $attention
  done
  peers fa4-ce-triton --kernel attention=fa4 --kernel cross_entropy=triton
  peers fa4-norm-triton --kernel attention=fa4 --kernel norm=triton
  ;;
tests)
  run "GPU tests of fa4" python3 -m pytest $T/test_cuda_fa4.py -q -s -p no:cacheprovider
  run "GPU tests of the Triton RoPE" python3 -m pytest $T/test_triton_kernels.py -q -p no:cacheprovider -k rope
  ;;
levers)
  n=$(wc -w <<<"$points")
  for p in $points; do
    run "levers on fa4 $p" python3 $B/variants.py --quick --points "$p" --budget-seconds "$(share $n)" \
      --cases baseline repeat rope-triton ce-triton norm-triton --output "$out/levers-${p/@/-}.json"
    n=$((n - 1))
  done
  ;;
profiles)
  for p in $points; do
    for attention in sdpa fa4; do
      run "profile $attention $p" python3 $B/profile_update.py --point "$p" --kernel attention=$attention \
        --output "$out/profile-$attention-${p/@/-}.json"
    done
  done
  ;;
small)
  n=$(wc -w <<<"$points")
  for p in $points; do
    run "small batch $p" python3 $B/variants.py --quick --points "$p" --cases baseline repeat attn-sdpa \
      --budget-seconds "$(share $n)" --output "$out/small-${p/@/-}.json"
    n=$((n - 1))
  done
  ;;
guide)
  for attention in auto sdpa; do  # the guide's worker command (250m@2048x8, 5 windows of 10 s)
    # shellcheck disable=SC2046
    run "guide worker --attention-backend $attention" python3 -m tiny_llm benchmark-throughput-worker $(point 250m 2048 8) \
      --output "$out/guide-250m-c2048x8-$attention.json" --warmup 20 --windows 5 --window-seconds 10 --attention-backend $attention
  done
  # shellcheck disable=SC2046
  run "optimizer timing 500m@4096x16 --attention-backend auto" python3 -m tiny_llm benchmark-throughput-worker \
    $(point 500m 4096 16) --optimizer-timing --output "$out/timing-500m-c4096x16-auto.json" \
    --warmup 5 --windows 2 --window-seconds 5 --attention-backend auto
  ;;
gqa-rope)
  run "GPU tests of the Triton RoPE" python3 -m pytest $T/test_triton_kernels.py -q -p no:cacheprovider -k rope
  n=$(wc -w <<<"$points")
  for p in $points; do
    run "rope fused on a grouped model $p" python3 $B/variants.py --quick --points "$p" --budget-seconds "$(share $n)" \
      --cases baseline repeat rope-triton --output "$out/gqa-rope-${p/@/-}.json"
    n=$((n - 1))
  done
  run "GPU tests of fa4 with the fused RoPE" python3 -m pytest $T/test_cuda_fa4.py -q -s -p no:cacheprovider -k "gqa or mqa-rope"
  ;;
*)
  echo "fa4: unknown part '$part' (a, b, c, d, tests, levers, profiles, small, guide, gqa-rope)" >&2
  exit 2
  ;;
esac
grep -v '^\s*$' "$out/log.txt" | tail -n 60
