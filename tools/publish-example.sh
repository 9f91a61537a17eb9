#!/usr/bin/env bash
# Publishes a packed end-to-end run (tools/h200.sh e2e's e2e-<mode>.tar.gz) as a worked
# example: copies what a reader opens into DEST, and leaves what an auditor needs in the
# tarball.
#
#   tools/publish-example.sh TAR DEST
#
# DEST gets, per campaign folder found (throughput/, optimizer/): the collect README,
# results.csv/json, the plots, optimizer.csv/json, status.txt, audit.json, audit.txt,
# accounting.txt and manifest.json; the whole report/ folder; gpu.txt, summary.txt and
# STATE.txt. Raw results, job scripts and logs, frozen sources and the scheduler's
# registry stay in TAR only: they are what `throughput-audit` re-derives every figure
# from (unpack TAR anywhere and audit the campaign folders), and the frozen sources would
# be a second copy of the code in the tree.
#
# DEST is replaced whole, and only once the new copy is complete. Exit status: 0 done;
# 2 bad arguments or an unreadable tarball (DEST untouched).
set -euo pipefail

die() { echo "publish-example: $*" >&2; exit 2; }
[ $# -eq 2 ] || die "usage: tools/publish-example.sh TAR DEST"
tar_in=$1 dest=${2%/}
[ -f "$tar_in" ] || die "$tar_in: no such file (the e2e-<mode>.tar.gz that tools/h200.sh e2e packed)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$tar_in" -C "$work" 2>/dev/null || die "$tar_in: not a readable tar.gz"
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'e2e-*' | head -1)
[ -n "$src" ] && [ -f "$src/STATE.txt" ] || die "$tar_in: no e2e-<mode>/STATE.txt inside: not a tarball packed by tools/h200.sh e2e"

stage=$work/publish
mkdir -p "$stage"
for f in STATE.txt gpu.txt summary.txt; do
  [ -f "$src/$f" ] && cp "$src/$f" "$stage/"
done
for campaign in throughput optimizer; do
  [ -f "$src/$campaign/manifest.json" ] || continue
  mkdir -p "$stage/$campaign"
  for f in README.md results.csv results.json optimizer.csv optimizer.json status.txt audit.json audit.txt \
           accounting.txt manifest.json; do
    [ -f "$src/$campaign/$f" ] && cp "$src/$campaign/$f" "$stage/$campaign/"
  done
  find "$src/$campaign" -maxdepth 1 -name '*.png' -exec cp {} "$stage/$campaign/" \;
done
[ -d "$src/report" ] && cp -r "$src/report" "$stage/report"

mkdir -p "$(dirname "$dest")"
rm -rf "$dest.new" && mv "$stage" "$dest.new"
rm -rf "$dest.old"; [ -e "$dest" ] && mv "$dest" "$dest.old"
mv "$dest.new" "$dest" && rm -rf "$dest.old"
echo "published $(cat "$dest/STATE.txt") run from $tar_in into $dest: $(find "$dest" -type f | wc -l) files"
