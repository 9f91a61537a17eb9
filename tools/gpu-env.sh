# Source on a GPU machine that has torch but not this workspace installed (no network):
#   source tools/gpu-env.sh   # installs carried wheels from .whl/ and puts packages/*/src on PYTHONPATH
# The lent H200 image ships torch, triton, pyyaml, anyio, matplotlib; msgspec travels as a wheel.
_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if compgen -G "$_root/.whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$_root"/.whl/*.whl
fi
_site=/tmp/site
# FlashAttention-4's CuTe DSL, where tools/h200/lib.sh's fa4_install put it (--target skips its .pth file).
[ -d /tmp/site/nvidia_cutlass_dsl/dsl_packages ] && _site="$_site:/tmp/site/nvidia_cutlass_dsl/dsl_packages"
_pp=$_site
for _src in "$_root"/packages/*/src; do _pp="$_pp:$_src"; done
export PYTHONPATH="$_pp${PYTHONPATH:+:$PYTHONPATH}"
# Campaign jobs (profile local-gpu) replace PYTHONPATH with their frozen sources; tools/compute-python
# appends this so the carried wheels stay importable there.
export THROUGHPUT_EXTRA_PYTHONPATH=$_site
export PYTHONUNBUFFERED=1
unset _root _pp _src _site
