#!/usr/bin/env bash
# The device recipes: what each measures on the lent GPU machine, one file each under tools/h200/.
# Usage: tools/h200.sh RECIPE [ARGS...]   (tools/h200.sh RECIPE --help where the recipe has one)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
recipes() { for f in "$here"/h200/*.sh; do [ "$(basename "$f")" = lib.sh ] || basename "$f" .sh; done; }
usage() {
  sed -n '2,3p' "$0" | sed 's/^# \{0,1\}//'
  echo "Recipes:"
  for r in $(recipes); do printf '  %-18s %s\n' "$r" "$(sed -n '2s/^# \{0,1\}//p' "$here/h200/$r.sh")"; done
}
case ${1:-} in
  "") usage >&2; exit 2 ;;
  -h|--help) usage; exit 0 ;;
esac
recipe=$1; shift
[ "$recipe" != lib ] && [ -f "$here/h200/$recipe.sh" ] || { echo "h200.sh: no recipe $recipe (one of: $(recipes | paste -sd " "))" >&2; exit 2; }
exec bash "$here/h200/$recipe.sh" "$@"
