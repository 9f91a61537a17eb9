#!/usr/bin/env bash
# setup-time [OUTDIR [SECONDS]]: the guide's worker command cold, then warm from the compiled update it saved (issue 45).
# On the lent GPU, one call: the guide's individual-point command (250m@2048x8, 5 windows of 10 s)
# with --compile-cache into a new folder and new node-local compiler caches (inductor's, Triton's):
# a cold job on a node that never compiled the point; then the same command with other new
# node-local caches, loading what the first saved: a warm job of the point on another node.
# FlashAttention-4 is the default attention where `fa4` installed it on this machine. Results in
# OUTDIR/guide-cold.json and guide-warm.json; each one's setup phases, cache state and tokens/s printed;
# then, where 100 s are left, benchmarks/setup_profile.py's cold setup under cProfile. A call returns
# at most 8 files: run it into a folder under /tmp and `tools/h200.sh pack` that.
# Usage: tools/h200.sh setup-time [OUTDIR [SECONDS]]   (default $OUT, 420 s)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
out=${1:-${OUT:?output folder}} seconds=${2:-420}
prepare_gpu && commit_txt "$out"
commands=$out/command.txt && echo "tools/h200.sh setup-time $*" >> "$commands"
deadline "$seconds"
cache=$(mktemp -d /tmp/compiled.XXXX)
for state in cold warm; do
  node=$(mktemp -d /tmp/node.XXXX)
  # shellcheck disable=SC2046
  run_apart "guide-$state" env TORCHINDUCTOR_CACHE_DIR="$node/inductor" TRITON_CACHE_DIR="$node/triton" \
    python3 -m tiny_llm benchmark-throughput-worker $(point 250m 2048 8) --output "$out/guide-$state.json" \
    --warmup 20 --windows 5 --window-seconds 10 --compile-cache "$cache"
  python3 - "$out/guide-$state.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r.get("compile_cache") or {}
print(sys.argv[1].rsplit("/", 1)[-1], c.get("state"), "startup", r.get("startup_seconds"), "setup", r.get("setup_seconds"),
      {k: round(v, 2) for k, v in r.get("setup_phases", {}).items()}, "tokens/s", (r.get("throughput") or {}).get("tokens_per_second"),
      "kernels", r.get("kernels"), c.get("note", ""))
PY
done
ls -la "$cache" > "$out/compiled.txt"
# Then, where time is left, the cold setup again under cProfile: what inside build and first_run
# takes the time (benchmarks/setup_profile.py: imports, CUDA context, own seconds per package).
if [ "$(left)" -gt 100 ]; then
  run_apart setup-profile python3 $B/setup_profile.py --point 250m@2048x8 --output "$out/setup-profile.json"
  head -n 8 "$out/setup-profile.txt"
fi
