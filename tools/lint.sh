#!/usr/bin/env bash
# The lint and type gate: ruff's lint rules, ruff's formatting and mypy, each configured in
# the root pyproject.toml. .ci/run runs it right after `uv sync --locked`: a finding fails CI
# (non-zero exit); all three run so that one pass shows everything.
#   tools/lint.sh          check only
#   tools/lint.sh --fix    apply ruff's safe fixes and its formatting first, then check
# UV may name another uv command ("python3 -m uv" where uv is not on PATH).
set -uo pipefail

cd "$(dirname "$0")/.."
read -r -a uv <<<"${UV:-uv}"

if [[ "${1:-}" == "--fix" ]]; then
    "${uv[@]}" run --locked ruff check --fix --quiet . || true
    "${uv[@]}" run --locked ruff format --quiet .
elif [[ $# -gt 0 ]]; then
    echo "usage: tools/lint.sh [--fix]" >&2
    exit 2
fi

rc=0
"${uv[@]}" run --locked ruff check . || rc=1
"${uv[@]}" run --locked ruff format --check . || rc=1
"${uv[@]}" run --locked mypy || rc=1
exit "$rc"
