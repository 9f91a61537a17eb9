#!/usr/bin/env bash
# e2e --window-seconds S [...] | --cpu | --slurm: both campaigns, audits and the report, packed.
# End to end on one GPU machine: a throughput campaign for 20m and 250m at
# contexts 512 and 2048, each curve doubling its batch until a confirmed CUDA OOM, on the
# local scheduler; then its optimizer-timing follow-up, status, collect, throughput-audit on
# both campaigns, throughput-report on the pair; everything packed into one tar.gz.
#
#   tools/h200.sh e2e --window-seconds S [--budget SECONDS] [--parallel-optimizer-points]
#                     [--runs DIR] [--out DIR] [--state-in TAR] [--retry-failed]
#   tools/h200.sh e2e --cpu [--budget SECONDS] ...     # the same path on a CPU: tiny, contexts 128 256,
#                                                       # --max-batch 4, 0.5 s windows, both campaigns
#                                                       # with tests/scripted_worker.py (under a minute)
#   tools/h200.sh e2e --slurm --window-seconds S [--contexts "L ..."] ...
#                     # the production path: the offline local Slurm (tools/local-slurm.sh, the
#                     # machine's GPUs as gres; carry .slurm-debs and .whl), the guide's drivers
#                     # with THROUGHPUT_SWEEP_PROFILE=local-slurm-gpu, the real worker, 20m at
#                     # context 2048 unless --contexts says otherwise, sacct in the audit
#
# Resumable and idempotent: run the same command again and each stage that is complete is
# skipped. --budget (default 540 s) stops the watcher with SIGINT early enough that the
# call ends inside the device's 10-minute command limit; the local scheduler's jobs run
# in their own sessions and keep running, and the next call (within the 30 s the machine
# stays warm) resumes the campaign. Exit status: 0 done and packed; 75 stopped at the
# budget (run the same command again); 1 a stage failed (audit or report checks
# included); 2 bad arguments or a missing package. --slurm keeps Slurm's accounting on the
# machine, so it resumes only while the machine stays warm: a lost machine starts over
# (--state-in is refused there; the audit could not check the lost jobs against sacct).
#
# Environment: on the GPU machine the workspace is not installed; tools/gpu-env.sh
# installs the carried wheels (.whl/: msgspec and pypdf, which the image lacks) into
# /tmp/site and puts packages/*/src on PYTHONPATH. Jobs run with the profile
# configs/clusters/local-gpu.yaml, whose compute Python is tools/compute-python (python3
# plus the carried wheels after the campaign's frozen sources). --cpu uses the same
# profile with THROUGHPUT_PYTHON=.venv/bin/python (the workspace's interpreter).
#
# What comes back ($OUT, at most 8 files): e2e-<mode>.tar.gz (the campaign folders with
# collect's README/CSV/JSON/plots, audit.json and accounting.txt, the report folder with
# the PDF and figures, status and summary; files over 2 MB and the compiled artifacts in
# compiled/ are left out and listed in LEFT_OUT.txt), summary.txt and e2e.log. The tarball
# is also the state: after a lost machine, carry it back and pass --state-in (with
# --retry-failed: jobs that were running on the lost machine end as NODE_FAIL); the jobs
# after it compile again, and the audit names the warm setups before it as not checked
# (--no-compiled), their artifacts having stayed on the lost machine.
#
# Time on one H200 (estimates from the committed measurements in
# packages/tiny-llm/benchmarks/results/; not yet measured end to end):
# - one worker process: ~5-10 s start (python, torch, CUDA), setup 13-52 s (compile and
#   graph capture: 13-28 s for 20m, 44-52 s for 250m; a warm inductor cache on the same
#   machine may shorten later ones), warm-up 20 updates (up to ~11 s for 250m at 2048,
#   batch 64), then 5 windows of S seconds, each at least 20 updates (5 extra windows
#   when the CV is above 5%). About 40-60 s per point at S=2, 60-100 s at S=10.
# - throughput campaign: memory extrapolated from the setup peaks (20m@512 b128 14.7 GiB,
#   250m@2048 b16 33 GiB reserved) puts the first OOM near 20m@512 b2048, 20m@2048 b512,
#   250m@512 b512, 250m@2048 b128: ~36 fitting points + 4 OOM points, ~40 jobs.
#   One H200: ~30-40 min at S=2, ~60 min at S=10.
# - optimizer follow-up: every fitting point again with two workers (baseline and
#   instrumented): ~72 worker processes, ~1.5-2x the throughput campaign, parallel or not
#   (on one GPU the local scheduler runs one job at a time either way).
# - status, collect, audits: ~10-30 s; report: ~20-60 s; packing: seconds.
# So one H200 needs ~1.5-2.5 h of device time at S=2: more than one session's 30 minutes.
# nvidia-h200-x2: the local scheduler runs one job per GPU, so the four curves advance two
# at a time and the optimizer points (with --parallel-optimizer-points, all of them) two at
# a time: close to half (the longest curve, 20m@512 with ~12 points, bounds the
# throughput stage at ~10-12 min at S=2). Still over 30 minutes for both stages: plan on
# the throughput campaign in one session and the follow-up in the next (--state-in).
set -uo pipefail

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
die() { echo "h200.sh e2e: $*" >&2; exit 2; }

cpu=0 slurm=0 contexts_arg="" window="" budget=540 parallel=0 runs="" out="${OUT:-}" state_in="" retry=0 max_batch=""
compiled=()
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) cpu=1 ;;
    --slurm) slurm=1 ;;
    --contexts) contexts_arg=${2:?}; shift ;;
    --window-seconds) window=${2:?}; shift ;;
    --budget) budget=${2:?}; shift ;;
    --parallel-optimizer-points) parallel=1 ;;
    --runs) runs=${2:?}; shift ;;
    --out) out=${2:?}; shift ;;
    --state-in) state_in=${2:?}; shift ;;
    --retry-failed) retry=1 ;;
    --max-batch) max_batch=${2:?}; shift ;;
    -h|--help) usage ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done
[[ "$budget" =~ ^[0-9]+$ ]] || die "--budget $budget: seconds, a whole number"

source "$(dirname "$0")/lib.sh"
profile=local-gpu
allow_test=()
if [ "$slurm" = 1 ]; then
  [ "$cpu" = 0 ] || die "--slurm runs on the GPU machine; --cpu is the local scheduler's CPU rehearsal"
  [ -z "$state_in" ] || die "--slurm cannot restore a packed state: Slurm's accounting of the lost jobs stayed on the lost machine"
  mode=h200-slurm; models=(20m); read -r -a contexts <<< "${contexts_arg:-2048}"; worker=()
  [ -n "$window" ] || die "--window-seconds S is required on the GPU (the protocol default is 10)"
  [ -d .slurm-debs ] || die "no .slurm-debs/: run tools/fetch-slurm-debs.sh on Debian 12 and carry it"
  runs=${runs:-runs/slurm-h200}
  source tools/gpu-env.sh
  PY=python3
  profile=local-slurm-gpu
  # The guide's (docs/guide.md) commands verbatim: the profile is chosen once, in the environment.
  export THROUGHPUT_SWEEP_PROFILE=$profile
  LOCAL_SLURM_OFFLINE_DEBS="$root/.slurm-debs" tools/local-slurm.sh start || die "the offline Slurm did not start"
  eval "$(tools/local-slurm.sh env)"
elif [ "$cpu" = 1 ]; then
  mode=cpu; models=(tiny); contexts=(128 256); window=${window:-0.5}; max_batch=${max_batch:-4}
  runs=${runs:-runs/e2e-cpu}
  PY=${THROUGHPUT_PYTHON:-$root/.venv/bin/python}
  export THROUGHPUT_PYTHON=$PY            # tools/compute-python runs the jobs with it
  pp=""; for s in "$root"/packages/*/src; do pp="$pp${pp:+:}$s"; done
  export PYTHONPATH="$pp" PYTHONUNBUFFERED=1
  # --optimizer-timing needs CUDA (its events live inside the CUDA graph) and the report
  # needs GPU memory peaks, so on the CPU both campaigns run tests/scripted_worker.py: real
  # records (the real measurement protocol against modelled update times, memory peaks,
  # bursts), outcomes from $SCRIPTED_WORKER_PLAN (default: every point ok).
  worker=(--worker "$root/tests/scripted_worker.py")
  # Its campaigns pass the audit and the report only when allowed, under a banner.
  allow_test=(--allow-test-worker)
else
  mode=h200; models=(20m 250m); contexts=(512 2048); worker=()
  [ -n "$window" ] || die "--window-seconds S is required on the GPU (the protocol default is 10)"
  runs=${runs:-runs/e2e-h200}
  source tools/gpu-env.sh
  PY=python3
fi
out=${out:-$runs/out}
mkdir -p "$runs" "$out"
runs=$(cd "$runs" && pwd); out=$(cd "$out" && pwd)
tp=$runs/throughput opt=$runs/optimizer rep=$runs/report
log=$out/e2e.log
exec > >(tee -a "$log") 2>&1
say() { echo "[e2e $(date +%H:%M:%S) +${SECONDS}s] $*"; }
say "mode $mode, runs $runs, window ${window}s, budget ${budget}s, parallel optimizer points $parallel"

# ------------------------------------------------------------------ preflight (no GPU time)
"$PY" - <<'EOF' || die "a package is missing (carry .whl/ with msgspec and pypdf; see docs/examples/README.md)"
import importlib.util, sys
missing = [m for m in ("msgspec", "pypdf", "yaml", "anyio", "matplotlib", "torch",
                       "throughput_sweep", "throughput_audit", "throughput_report", "tiny_llm") if importlib.util.find_spec(m) is None]
if missing:
    print("missing:", " ".join(missing), file=sys.stderr); sys.exit(1)
import torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA devices {torch.cuda.device_count()}")
EOF
if [ "$mode" != cpu ] && [ ! -s "$runs/gpu.txt" ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$runs/gpu.txt" || true
fi
[ -s "$runs/gpu.txt" ] && cat "$runs/gpu.txt"

if [ -n "$state_in" ] && [ ! -e "$tp/manifest.json" ]; then
  say "restoring state from $state_in"
  tar -xzf "$state_in" -C "$runs" --strip-components=1 || die "cannot unpack $state_in"
  # The compiled artifacts did not travel in the pack: the jobs after this compile again, and the
  # audit cannot check what the jobs before this loaded (it says so: not applicable).
  if grep -q ": a compiled artifact" "$runs/LEFT_OUT.txt" 2>/dev/null; then compiled=(--no-compiled); fi
  want=$(cat "$runs/ROOT.txt" 2>/dev/null || true)
  [ -z "$want" ] || [ "$want" = "$root" ] || die "$state_in was made under $want, this checkout is $root: absolute paths in the campaign would not match"
fi
echo "$root" > "$runs/ROOT.txt"

# The guide's drivers, as a user runs them.
sweep() { "$PY" scripts/throughput_sweep.py "$@"; }
audit() { "$PY" scripts/throughput_audit.py "$@" "${allow_test[@]}" "${compiled[@]}"; }
report() { "$PY" scripts/throughput_report.py "$@" "${allow_test[@]}"; }
chosen=(--profile "$profile"); [ "$slurm" = 1 ] && chosen=()   # --slurm: from THROUGHPUT_SWEEP_PROFILE

pack() {  # $1: complete|partial
  local name=e2e-$mode stage=$runs/.pack
  rm -rf "$stage"; mkdir -p "$stage/$name"
  # What an earlier pack left out (a restored state) stays listed.
  if [ -f "$runs/LEFT_OUT.txt" ]; then cp "$runs/LEFT_OUT.txt" "$stage/$name/"; else : > "$stage/$name/LEFT_OUT.txt"; fi
  (cd "$runs" && find . -path ./.pack -prune -o -path ./out -prune -o -type f -print) | while read -r f; do
    f=${f#./}
    if [ "$f" = LEFT_OUT.txt ] || [ "$f" = STATE.txt ]; then
      continue
    elif [[ $f == */$ARTIFACTS ]]; then
      echo "$f $(stat -c %s "$runs/$f") bytes: a compiled artifact (audit this copy with --no-compiled)" >> "$stage/$name/LEFT_OUT.txt"
    elif [ "$(stat -c %s "$runs/$f")" -gt 2097152 ]; then
      echo "$f $(stat -c %s "$runs/$f") bytes" >> "$stage/$name/LEFT_OUT.txt"
    else
      mkdir -p "$stage/$name/$(dirname "$f")"; cp -p "$runs/$f" "$stage/$name/$f"
    fi
  done
  echo "$1" > "$stage/$name/STATE.txt"
  tar -czf "$out/$name.tar.gz" -C "$stage" "$name" && rm -rf "$stage"
  say "packed $out/$name.tar.gz ($(du -h "$out/$name.tar.gz" | cut -f1), $1)"
}

summary() {
  {
    echo "# e2e $mode: $1"
    echo "window ${window}s; models ${models[*]}; contexts ${contexts[*]}${max_batch:+; max batch $max_batch}; $(date -u +%FT%TZ)"
    [ -s "$runs/gpu.txt" ] && echo "gpu: $(cat "$runs/gpu.txt")"
    for c in "$tp" "$opt"; do [ -e "$c/manifest.json" ] && { echo; sweep status --output "$c"; }; done
    for c in "$tp" "$opt"; do [ -s "$c/audit.txt" ] && { echo; cat "$c/audit.txt"; }; done
    [ -s "$rep/report.txt" ] && { echo; cat "$rep/report.txt"; }
  } > "$runs/summary.txt" 2>&1
  cp "$runs/summary.txt" "$out/summary.txt"
}

stop_at_budget() {
  say "stopped at the budget ($budget s) during $1; jobs keep running; run the same command again within 30 s to resume"
  summary "stopped during $1 (resume with the same command)"; pack partial; exit 75
}

# Runs a watcher under the remaining budget. Returns when every curve has ended with a
# result; exits when a curve is blocked (run's exit status 3) or the budget is spent.
watch() {  # $1: stage name; rest: throughput-sweep run arguments
  local stage=$1; shift
  local left=$((budget - SECONDS - 45))   # keep 45 s for status, summary and packing
  [ "$left" -ge 20 ] || stop_at_budget "$stage"
  say "$stage: throughput-sweep run $* (at most ${left}s)"
  timeout -s INT -k 30 "$left" "$PY" scripts/throughput_sweep.py run "$@" --no-progress
  local rc=$?
  case $rc in
    0) say "$stage: every curve has ended" ;;
    3) # blocked by a failure that is not a memory boundary: it needs a look before a
       # follow-up inherits an incomplete grid, so stop here and say how to go on
       say "$stage: curves are blocked by failures (see the status above); investigate, then run the same command with --retry-failed"
       summary "$stage ended with blocked curves"; pack partial; exit 1 ;;
    124|130|137) stop_at_budget "$stage" ;;
    *) say "$stage: throughput-sweep run failed (exit $rc)"; summary "$stage failed (exit $rc)"; pack partial; exit 1 ;;
  esac
}

extra=(); [ "$retry" = 1 ] && extra+=(--retry-failed)

# ------------------------------------------------------------------ 1. throughput campaign
if [ -e "$tp/manifest.json" ]; then
  watch throughput --output "$tp" --resume "${extra[@]}"
else
  watch throughput --output "$tp" "${chosen[@]}" --models "${models[@]}" --contexts "${contexts[@]}" \
    --window-seconds "$window" ${max_batch:+--max-batch "$max_batch"} "${worker[@]}"
fi

# ------------------------------------------------------------------ 2. optimizer-timing follow-up
par=(); [ "$parallel" = 1 ] && par=(--parallel-optimizer-points)
if [ -e "$opt/manifest.json" ]; then
  watch optimizer --optimizer-timing-from "$tp" --output "$opt" --resume "${par[@]}" "${extra[@]}"
else
  watch optimizer --optimizer-timing-from "$tp" --output "$opt" "${chosen[@]}" "${par[@]}" "${worker[@]}"
fi

# ------------------------------------------------------------------ 3. status, collect, audit
fail=0
for c in "$tp" "$opt"; do
  sweep status --output "$c" > "$c/status.txt" 2>&1
  sweep collect --output "$c" > /dev/null || { say "collect failed for $c"; fail=1; }
  audit --output "$c" > "$c/audit.txt" 2>&1 || { say "audit failed for $c"; fail=1; }
  cat "$c/audit.txt"
done

# ------------------------------------------------------------------ 4. report on the pair
if [ ! -e "$rep/report.pdf" ]; then
  rm -rf "$rep.partial"; [ -e "$rep" ] && mv "$rep" "$rep.partial"   # a report is never overwritten
  if report --throughput "$tp" --optimizer "$opt" --output "$rep" > "$runs/report.txt" 2>&1; then
    mv "$runs/report.txt" "$rep/report.txt"; rm -rf "$rep.partial"
  else
    say "throughput-report failed:"; cat "$runs/report.txt"; fail=1
  fi
fi
[ -s "$rep/report.txt" ] && cat "$rep/report.txt"

# ------------------------------------------------------------------ 5. pack
if [ "$fail" = 0 ]; then
  summary "complete"; pack complete; say "done: $out/e2e-$mode.tar.gz, $out/summary.txt"; exit 0
fi
summary "a stage failed"; pack partial; exit 1
