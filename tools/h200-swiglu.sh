#!/usr/bin/env bash
# The Triton SwiGLU on the lent H200: tests, variants and profile (see tools/h200-kernel.sh).
# Usage: tools/h200-swiglu.sh [OUTDIR]      (default $OUT)
exec "$(dirname "$0")/h200-kernel.sh" swiglu "$@"
