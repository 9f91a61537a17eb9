#!/usr/bin/env bash
# pack DIR [NAME]: DIR as one file, $OUT/NAME.tgz (default NAME: DIR's own name).
# A call brings back at most 8 files from $OUT (the device's limits): a call that runs several
# recipes gives each a folder under one /tmp folder and packs that, so nothing is left out.
# Usage: tools/h200.sh pack /tmp/r   (then tar -xzf r.tgz where the files came back)
set -uo pipefail
dir=${1:?usage: tools/h200.sh pack DIR [NAME]}
name=${2:-$(basename "$dir")}
tar -czf "${OUT:?output folder}/$name.tgz" -C "$(dirname "$dir")" "$(basename "$dir")" && ls -l "$OUT/$name.tgz"
