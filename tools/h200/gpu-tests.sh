#!/usr/bin/env bash
# gpu-tests [OUTDIR [SECONDS [TEST ...]]]: GPU tests side by side, one process each (correctness only, never timings).
# On the lent GPU, one call: each TEST (a file under packages/tiny-llm/tests, with ::name or a
# pytest -k expression after "@", e.g. test_cuda_transformers.py@olmo) runs as its own pytest
# process, all at once: their compiles share the machine's CPUs, their memory the GPU (keep the
# sum under its memory). Output in OUTDIR/<file>[-<expr>].txt, commands and exit status in
# OUTDIR/command.txt; every process is cut at SECONDS (default 300).
# FlashAttention-4 is the default attention where `fa4` installed it on this machine.
# Usage: tools/h200.sh gpu-tests [OUTDIR [SECONDS [TEST ...]]]
set -uo pipefail
source "$(dirname "$0")/lib.sh"
out=${1:-${OUT:?output folder}} seconds=${2:-300}
shift $(($# < 2 ? $# : 2))
prepare_gpu && commit_txt "$out"
commands=$out/command.txt && echo "tools/h200.sh gpu-tests $*" >> "$commands"
deadline "$seconds"
for test in "$@"; do
  file=${test%%@*} expr=${test#*@}
  name=${file%.py}; name=${name//::/-}
  select=()
  if [ "$expr" != "$test" ]; then name="$name-${expr// /_}"; select=(-k "$expr"); fi
  run_apart "$name" python3 -m pytest -q -p no:cacheprovider -m cuda -rs -s "$T/$file" "${select[@]}" &
done
wait
for f in "$out"/*.txt; do case $f in */command.txt|*/gpu.txt|*/commit.txt) ;; *) echo "== ${f##*/}"; grep -E "passed|failed|skipped|error|loss|mean" "$f" | tail -6 ;; esac; done
