#!/usr/bin/env bash
# energy PART [OUTDIR [SECONDS]]: the energy counter's figures (parts 1, 2, 3).
# On the lent H200 (no network; torch, triton and nvidia-ml-py from the image; .whl carried):
# the energy counter's figures, in calls of under 10 minutes (each step's output is written as
# it ends, and a step cut short by the deadline loses only itself):
#   part 1: the GPU tests of the counter (test_cuda_energy.py); benchmarks/energy_check.py (the worker's window energy against NVML's power samples
#           over the same windows, within 10%) at 250m@2048x16 and 20m@512x64; then the guide's
#           worker command with the counter read and with --energy off, once each;
#   part 2: the guide's worker command again, --energy off first this time (two runs of each
#           mode, alternated: the yardstick for "reading the counter costs no throughput");
#   part 3: a short real campaign on the local scheduler (20m at contexts 512 and 2048,
#           --max-batch 16, 2 s windows) in /tmp/energy-campaign, then status, collect and the
#           audit; run it again within the machine's warm time to resume a campaign cut short.
# Usage: tools/h200.sh energy PART [OUTDIR [SECONDS]]   (default $OUT, 540 s)
set -uo pipefail
part=${1:?part: 1, 2 or 3}
out=${2:-${OUT:?output folder: an argument or \$OUT}}
seconds=${3:-540}
source "$(dirname "$0")/lib.sh"
prepare_gpu power.limit
python3 -c 'import torch, pynvml; print("torch", torch.__version__, "nvidia-ml-py", getattr(pynvml, "__version__", "?"))' | tee -a "$out/gpu.txt"
deadline "$seconds"
guide() {  # the guide's worker command (250m@2048x8, 5 windows of 10 s), energy auto|off, round
  # shellcheck disable=SC2046
  run "guide worker --energy $1, round $2" python3 -m tiny_llm benchmark-throughput-worker $(point 250m 2048 8) \
    --output "$out/guide-250m-c2048x8-energy-$1-$2.json" --warmup 20 --windows 5 --window-seconds 10 --energy "$1"
}
case $part in
1)
  run "GPU tests of the counter" timeout 120 python3 -m pytest $T/test_cuda_energy.py -q -p no:cacheprovider
  # shellcheck disable=SC2046
  run "energy check 250m@2048x16" python3 $B/energy_check.py $(point 250m 2048 16) --output "$out/energy-250m-c2048x16.json"
  # shellcheck disable=SC2046
  run "energy check 20m@512x64" python3 $B/energy_check.py $(point 20m 512 64) --output "$out/energy-20m-c512x64.json"
  guide auto 1
  guide off 1
  ;;
2)
  guide off 2
  guide auto 2
  ;;
3)
  c=/tmp/energy-campaign
  if [ -e "$c/manifest.json" ]; then
    run "campaign (resumed)" timeout -s INT -k 30 "$(($(left) - 60))" python3 scripts/throughput_sweep.py run --output "$c" --resume --no-progress
  else
    run campaign timeout -s INT -k 30 "$(($(left) - 60))" python3 scripts/throughput_sweep.py run --output "$c" \
      --profile configs/clusters/local-gpu.yaml --models 20m --contexts 512 2048 --max-batch 16 --window-seconds 2 --no-progress
  fi
  run status python3 scripts/throughput_sweep.py status --output "$c"
  run collect python3 scripts/throughput_sweep.py collect --output "$c"
  run audit python3 scripts/throughput_audit.py --output "$c"
  # The campaign's records and collect's outputs (no stdout/stderr logs over 1 MB).
  tar -czf "$out/energy-campaign.tar.gz" -C /tmp --exclude='*.log' energy-campaign
  ;;
esac
grep -v '^\s*$' "$out/log.txt" | grep -v '^SKIPPED' | tail -n 60
