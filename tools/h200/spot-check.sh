#!/usr/bin/env bash
# spot-check [--points N] [--seed S] [--dry-run] ...: re-measure a sample of the worked example.
# Spot check of the committed worked example on the GPU machine: restore the
# throughput campaign A from docs/examples/h200-e2e-state/e2e-h200.tar.gz, re-measure a
# seeded sample of its fitting points with the real worker on the local scheduler (no
# network, no Slurm), each curve's recommended batch among them, with A's protocol and
# frozen sources; then status, collect and the audit of the spot check, and its
# comparison with A into $OUT.
#
#   tools/h200.sh spot-check [--points N] [--seed S] [--budget SECONDS] [--runs DIR] [--out DIR]
#   tools/h200.sh spot-check --dry-run [--points N] [--seed S]   # on any machine: restore A and
#                                                                   # print the sample; nothing measured
#
# Defaults: --points 6, --seed 0, --budget 540, --runs runs/spot-h200, --out $OUT (else
# RUNS/out). Device call (nvidia-h200 or nvidia-h200-x2, carry .whl with msgspec and pypdf):
#
#   tools/h200.sh spot-check --out $OUT
#
# The committed A was frozen before attempts had a request.json: its frozen watchdog cannot
# run today's job scripts (throughput-schema upgrade rewrites records, never frozen code), so
# measuring needs an A frozen by today's code; --dry-run, status and the audit read it as is.
#
# Resumable like tools/h200.sh e2e: the watcher stops at the budget with SIGINT (exit
# 75), the local scheduler's jobs keep running, and the same command within the 30 s the
# machine stays warm resumes the spot check. Exit status: 0 the spot check passed its
# audit; 1 a stage failed, or the audit failed (a sampled point changed beyond the noise
# threshold: see comparison.md); 2 bad arguments or a missing package; 75 stopped at the
# budget. What comes back in $OUT: comparison.md, comparison.csv, comparison.json,
# comparison.pdf, ratios.png, summary.txt (status and audit), spot-check.log and
# spot-check-h200.tar.gz (the spot-check campaign: manifest, every attempt, collect's
# outputs, audit.json, spot-check/; the frozen copy is A's and is left out).
#
# Time on one H200: each point is one worker process (~5-10 s start, setup 13-52 s,
# warm-up, 5 windows of 2 s): ~40-90 s a point, one job per GPU; 6 points take ~5-9 min
# on one GPU, about half on two.
set -uo pipefail

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
die() { echo "h200.sh spot-check: $*" >&2; exit 2; }

points=6 seed=0 budget=540 runs="" out="${OUT:-}" dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --points) points=${2:?}; shift ;;
    --seed) seed=${2:?}; shift ;;
    --budget) budget=${2:?}; shift ;;
    --runs) runs=${2:?}; shift ;;
    --out) out=${2:?}; shift ;;
    --dry-run) dry=1 ;;
    -h|--help) usage ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done
[[ "$budget" =~ ^[0-9]+$ ]] || die "--budget $budget: seconds, a whole number"
[[ "$points" =~ ^[0-9]+$ && "$seed" =~ ^-?[0-9]+$ ]] || die "--points and --seed take whole numbers"

source "$(dirname "$0")/lib.sh"
state=docs/examples/h200-e2e-state/e2e-h200.tar.gz
[ -s "$state" ] || die "no $state in this checkout"
if [ "$dry" = 1 ]; then
  # The workspace's interpreter where there is one (a CPU machine); no GPU is needed.
  PY=${THROUGHPUT_PYTHON:-$root/.venv/bin/python}; [ -x "$PY" ] || { source tools/gpu-env.sh; PY=python3; }
else
  source tools/gpu-env.sh
  PY=python3
fi
runs=${runs:-runs/spot-h200}
out=${out:-$runs/out}
mkdir -p "$runs" "$out"
runs=$(cd "$runs" && pwd); out=$(cd "$out" && pwd)
a=$runs/e2e-h200/throughput spot=$runs/spot-check
log=$out/spot-check.log
exec > >(tee -a "$log") 2>&1
say() { echo "[spot-check $(date +%H:%M:%S) +${SECONDS}s] $*"; }
sweep() { "$PY" scripts/throughput_sweep.py "$@"; }

"$PY" - <<'EOF' || die "a package is missing (carry .whl/ with msgspec and pypdf; see docs/examples/README.md)"
import importlib.util, sys
missing = [m for m in ("msgspec", "pypdf", "yaml", "anyio", "matplotlib", "throughput_sweep",
                       "throughput_audit", "throughput_compare") if importlib.util.find_spec(m) is None]
if missing:
    print("missing:", " ".join(missing), file=sys.stderr); sys.exit(1)
EOF

# A as the example left it: complete, audited (audit.json, 0 failed), its frozen copy
# intact. Its absolute paths name the checkout it ran in (/work/main); the spot check
# needs none of them: it reads A's files from here, copies A's frozen files by their
# manifest, and runs on this checkout's profile local-gpu (A's compute Python path is
# the old checkout's).
if [ ! -e "$a/manifest.json" ]; then
  say "restoring A from $state into $runs"
  tar -xzf "$state" -C "$runs" || die "cannot unpack $state"
fi
sweep status --output "$a" > "$runs/source-status.txt" 2>&1 || die "A ($a) is not complete: $(tail -n 3 "$runs/source-status.txt")"

if [ "$dry" = 1 ]; then
  sweep run --spot-check-from "$a" --points "$points" --seed "$seed" --output "$spot" --profile local-gpu --dry-run
  exit $?
fi

left=$((budget - SECONDS - 60))   # a minute for status, collect, the audit and packing
[ "$left" -ge 20 ] || die "--budget $budget leaves no time to measure"
if [ -e "$spot/manifest.json" ]; then
  args=(--output "$spot" --resume)
else
  args=(--spot-check-from "$a" --points "$points" --seed "$seed" --output "$spot" --profile local-gpu)
fi
say "throughput-sweep run ${args[*]} (at most ${left}s)"
timeout -s INT -k 30 "$left" "$PY" scripts/throughput_sweep.py run "${args[@]}" --no-progress
rc=$?

pack() {
  local stage=$runs/.pack name=spot-check-h200
  rm -rf "$stage"; mkdir -p "$stage"
  (cd "$runs" && tar -czf "$out/$name.tar.gz" --exclude="spot-check/frozen" --exclude="spot-check/.local-jobs/*.log" spot-check)
  for f in comparison.md comparison.csv comparison.json comparison.pdf ratios.png; do
    [ -e "$spot/spot-check/$f" ] && cp "$spot/spot-check/$f" "$out/$f"
  done
  rm -rf "$stage"
}
summary() {
  { echo "# spot check of the H200 example: $1"; date -u +%FT%TZ
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
    echo; sweep status --output "$spot"
    [ -s "$spot/audit.txt" ] && { echo; cat "$spot/audit.txt"; }
  } > "$out/summary.txt" 2>&1
}

case $rc in
  # 5: every point ended and the comparison fails; the audit below says so, and on which points.
  0|5) say "every sampled point has ended; compared with A" ;;
  124|130|137) say "stopped at the budget; jobs keep running; run the same command again within 30 s to resume"
               summary "stopped at the budget (resume with the same command)"; pack; exit 75 ;;
  *) say "throughput-sweep run failed (exit $rc)"; summary "run failed (exit $rc)"; pack; exit 1 ;;
esac
fail=0
sweep collect --output "$spot" > /dev/null || { say "collect failed"; fail=1; }
"$PY" scripts/throughput_audit.py --output "$spot" > "$spot/audit.txt" 2>&1 || { say "the audit failed"; fail=1; }
cat "$spot/audit.txt"
[ -s "$spot/spot-check/comparison.md" ] && head -n 1 "$spot/spot-check/comparison.md"
summary "$([ $fail = 0 ] && echo passed || echo failed)"; pack
exit $fail
