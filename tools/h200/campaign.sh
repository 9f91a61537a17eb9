#!/usr/bin/env bash
# campaign NAME MODEL CONTEXT [SWEEP ARGS...]: one curve to its confirmed OOM on the local scheduler, packed.
# On the lent GPU: `throughput-sweep run` (profile local-gpu) for one model at one context, each
# batch doubling until a confirmed CUDA OOM, with SWEEP ARGS (a choice beside the guide's protocol,
# e.g. --precision fp8-tensorwise or --optimizer-name muon; --window-seconds S, default 2). The
# campaign lives in /tmp/campaigns/NAME; the watcher stops at BUDGET seconds (environment, default
# 500) and the local scheduler's job runs on: run the same command again (within the 30 s the
# machine stays warm) and it resumes. When the curve has ended: status, collect and the audit,
# then everything but the compiled artifacts packed into $OUT/NAME.tgz (audit a copy with
# --no-compiled); compare two such campaigns on any machine with `throughput-compare A B`.
# Exit status: 0 ended and packed; 75 stopped at the budget (run it again); 1 a step failed.
# Usage: tools/h200.sh campaign fp8 llama-3.2-1b 2048 --precision fp8-tensorwise
set -uo pipefail
name=${1:?usage: campaign NAME MODEL CONTEXT [SWEEP ARGS...]} model=${2:?model} context=${3:?context}
shift 3
source "$(dirname "$0")/lib.sh"
source tools/gpu-env.sh
out=${OUT:?output folder} budget=${BUDGET:-500}
dir=/tmp/campaigns/$name
mkdir -p /tmp/campaigns
sweep() { python3 scripts/throughput_sweep.py "$@"; }
window=(--window-seconds 2); [[ " $* " == *" --window-seconds "* ]] && window=()
if [ -e "$dir/manifest.json" ]; then
  args=(--output "$dir" --resume)
else
  args=(--output "$dir" --profile local-gpu --models "$model" --contexts "$context" "${window[@]}" "$@")
  echo "tools/h200.sh campaign $name $model $context $*" > /tmp/campaigns/$name.command
fi
pack() { tar -czf "$out/$1.tgz" --exclude="$ARTIFACTS" -C /tmp/campaigns "$name" && ls -l "$out/$1.tgz"; }
timeout -s INT -k 30 "$budget" python3 scripts/throughput_sweep.py run "${args[@]}" --no-progress  # not sweep(): timeout runs a program
case $? in
  0) ;;
  124|130|137)
    pack "$name.partial"
    echo "stopped at the budget ($budget s), the campaign so far in $out/$name.partial.tgz: run the same command again within 30 s"
    exit 75 ;;
  *) echo "throughput-sweep run failed"; sweep status --output "$dir"; exit 1 ;;
esac
sweep status --output "$dir" > "$dir/status.txt" 2>&1; cat "$dir/status.txt"
sweep collect --output "$dir" > /dev/null || exit 1
python3 scripts/throughput_audit.py --output "$dir" > "$dir/audit.txt" 2>&1; rc=$?; cat "$dir/audit.txt"
cp /tmp/campaigns/$name.command "$dir/command.txt" 2>/dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$dir/gpu.txt" 2>/dev/null
pack "$name"
exit $rc
