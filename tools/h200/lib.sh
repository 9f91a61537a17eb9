# Sourced by every recipe under tools/h200/: the repository root as the working folder, the
# recipe's deadline, and the runners that keep each command beside its output, so that a
# result folder can be committed with how each JSON in it was made.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
B=packages/tiny-llm/benchmarks T=packages/tiny-llm/tests
# A campaign's compiled artifacts (throughput_schema.layout.COMPILED, compile_cache.ARTIFACT_SUFFIX):
# a cache no figure rests on, which packs leave out (their sidecars stay).
ARTIFACTS="compiled/*.bin"

# gpu_txt OUT [FIELDS]: the GPU's name, memory and driver (and nvidia-smi's FIELDS) into OUT/gpu.txt.
gpu_txt() { nvidia-smi --query-gpu="name,memory.total,driver_version${2:+,$2}" --format=csv,noheader | tee "$1/gpu.txt"; }
# prepare_gpu [FIELDS]: the carried wheels and sources importable, $out made, its gpu.txt written.
prepare_gpu() {
  source tools/gpu-env.sh
  mkdir -p "$out"
  gpu_txt "$out" "${1:-}"
}
commit_txt() {  # OUT: the commit measured, into OUT/commit.txt
  local rev; rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  echo "commit $rev (plus working tree)" > "$1/commit.txt"
}

# deadline SECONDS: every later run is cut at SECONDS from now, and a step cut short loses only itself.
deadline() { end=$((SECONDS + $1)); }
left() { echo $((end - SECONDS > 1 ? end - SECONDS : 1)); }
# run NAME COMMAND...: the command, its output and its exit status, in order, into $out/log.txt.
run() {
  local name=$1; shift
  echo "== $name: $*" >> "$out/log.txt"
  timeout "$(left)" "$@" >> "$out/log.txt" 2>&1
  echo "== $name rc=$? at ${SECONDS}s" >> "$out/log.txt"
}
# run_apart NAME COMMAND...: the output into $out/NAME.txt and the command into $out/NAME.command;
# where $commands names a file, the command and its exit status are appended there instead.
run_apart() {
  local name=$1; shift
  if [ -n "${commands:-}" ]; then printf '%q ' "$@" >> "$commands"; echo >> "$commands"; else echo "$*" > "$out/$name.command"; fi
  timeout "$(left)" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  [ -z "${commands:-}" ] || echo "$name: exit $rc" | tee -a "$commands"
  return $rc
}
point() {  # MODEL CONTEXT BATCH: the recipe overrides of one point, as the campaign sets them
  echo "--config configs/$1.yaml --set model.context_length=$2 --set training.micro_batch_size=$3" \
    "--set training.batch_tokens=$(($2 * $3)) --set optimizer.lr=0.001 --set optimizer.beta2=0.99"
}

# FlashAttention-4's wheels exceed what one call carries (64 MiB with the working tree): the CuTe DSL
# runtime wheel travels split (`split -n 3` into .fa4a/, .fa4b/, .fa4c/, one part each), the small
# wheels in .fa4w/, over calls on one warm machine, each carrying what fits beside its own work.
# fa4_keep: what this call carries of them, kept in /tmp/fa4 for the later calls.
fa4_keep() {
  mkdir -p /tmp/fa4
  for f in .fa4*/part.* .fa4w/*.whl; do [ -f "$f" ] && cp "$f" /tmp/fa4/; done
  ls /tmp/fa4
}
# fa4_install: once per machine, the kept parts joined and every kept wheel installed into /tmp/site;
# then tools/gpu-env.sh again, which puts the CuTe DSL on the path.
fa4_install() {
  local wheel=/tmp/fa4/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
  fa4_keep >/dev/null
  if [ ! -d /tmp/site/flash_attn ]; then
    cat /tmp/fa4/part.* > "$wheel" 2>/dev/null
    python3 -c 'import sys, zipfile; sys.exit(zipfile.ZipFile(sys.argv[1]).testzip() is not None)' "$wheel" 2>/dev/null \
      && compgen -G "/tmp/fa4/flash_attn_4-*.whl" >/dev/null \
      || { rm -f "$wheel"; echo "fa4: parts or wheels missing in /tmp/fa4 ($(ls /tmp/fa4 | paste -sd ' ')): carry .fa4a, .fa4b, .fa4c and .fa4w on one warm machine" >&2; return 2; }
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/fa4/*.whl || return 2
  fi
  source tools/gpu-env.sh
}
