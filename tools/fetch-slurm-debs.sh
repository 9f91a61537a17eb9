#!/usr/bin/env bash
# Download (never install) the Debian 12 packages that the offline mode of
# tools/local-slurm.sh unpacks on a machine without network and without Slurm, such as the
# lent H200 (Ubuntu 24.04):
#
#   tools/fetch-slurm-debs.sh [DIR]      # default DIR: .slurm-debs (ignored by git)
#
# Then, on that machine (DIR carried along with the working tree):
#   LOCAL_SLURM_OFFLINE_DEBS=.slurm-debs tools/local-slurm.sh start
#
# The list is the one checked on the H200 (shared notes, "Slurm on the GPU machine,
# offline", plus libncurses6 for the mariadb client, found missing there by
# `tools/local-slurm.sh unpack`): Slurm 22.05, munge and MariaDB with every library they
# load that the H200's Ubuntu 24.04 image lacks (libaio1, liburing2, libdbus-1-3,
# libyaml-0-2, libncurses6 among them). Everything else they load (glibc, OpenSSL 3, zlib,
# PAM, ...) that image has in a version at least as new.
#
# Runs on Debian 12 (bookworm) x86_64 with apt. Idempotent: a package whose .deb (any
# version) is already in DIR is not downloaded again; stale versions are removed so that
# exactly one .deb per package stays. Prints the total size and fails when it exceeds the
# budget: the device tool carries at most 64 MiB (working tree, .slurm-debs and .whl).
set -euo pipefail

PACKAGES=(
    # Slurm 22.05.8
    slurmctld slurmd slurmdbd slurm-client slurm-wlm-basic-plugins slurm-wlm-mysql-plugin
    # munge
    munge libmunge2
    # MariaDB 10.11 (server, clients for mariadb-admin/my_print_defaults, its libraries)
    mariadb-server mariadb-server-core mariadb-client mariadb-client-core libmariadb3
    mariadb-common galera-4
    # libraries Slurm's daemons and plugins link to
    libpmix2 libhwloc15 libjwt0 libhttp-parser2.9 libjson-c5 liblua5.1-0 librrd8
    libfreeipmi17 libipmimonitoring6
    # libraries the H200's Ubuntu 24.04 image lacks
    libaio1 liburing2 libdbus-1-3 libyaml-0-2 libncurses6
)
# The debs travel with the working tree; together with .whl/ they must stay well under 64 MiB.
MAX_MIB="${FETCH_SLURM_DEBS_MAX_MIB:-40}"

die() { printf 'fetch-slurm-debs: ERROR: %s\n' "$*" >&2; exit 1; }

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/.slurm-debs}"

command -v apt-get >/dev/null 2>&1 || die "apt-get not found: run this on Debian 12 (bookworm)"
if [[ -r /etc/os-release ]]; then
    # shellcheck disable=SC1091
    codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
    [[ "$codename" == bookworm ]] ||
        die "this is '${codename:-unknown}', not Debian 12 (bookworm): the offline mode is built and checked for bookworm's packages"
fi
[[ "$(dpkg --print-architecture)" == amd64 ]] || die "architecture $(dpkg --print-architecture), not amd64 (the GPU machine is x86_64)"

mkdir -p "$dest"
cd "$dest"

# deb_of PKG: the .deb already in DIR for PKG (any version), if any.
deb_of() { compgen -G "${1}_*_*.deb" | head -n1 || true; }

missing=()
for p in "${PACKAGES[@]}"; do
    [[ -n "$(deb_of "$p")" ]] || missing+=("$p")
done

if ((${#missing[@]})); then
    printf 'fetch-slurm-debs: downloading %d package(s) into %s\n' "${#missing[@]}" "$dest" >&2
    # apt-get download fetches the candidate version of each name and installs nothing.
    # Its own messages (per-file progress, a warning about the _apt sandbox user) go to the log.
    log="$(mktemp)"
    trap 'rm -f "$log"' EXIT
    if ! apt-get download "${missing[@]}" >"$log" 2>&1; then
        # Offline, or stale package lists: say which, in one line, with the first apt error.
        first_err="$(grep -m1 -E '^(E|Err):' "$log" || tail -n1 "$log")"
        die "apt-get download failed (offline, or run 'apt-get update' first): $first_err"
    fi
    for p in "${missing[@]}"; do
        [[ -n "$(deb_of "$p")" ]] || die "apt-get download gave no .deb for $p"
    done
fi

# File names as plain as the device tool likes them: apt writes an epoch as "%3a", and
# versions hold "+" and "~"; dpkg -x reads the package from inside the file, not its name.
for f in *.deb; do
    clean="$(printf '%s' "$f" | tr -c 'A-Za-z0-9._-' '-')"
    [[ "$clean" == "$f" ]] || mv -f -- "$f" "$clean"
done

# Exactly one version per package: an older one left from an earlier fetch would be
# unpacked over (or under) the newer one.
for p in "${PACKAGES[@]}"; do
    mapfile -t versions < <(compgen -G "${p}_*_*.deb" | sort -V)
    if ((${#versions[@]} > 1)); then
        printf 'fetch-slurm-debs: removing older %s\n' "${versions[@]:0:${#versions[@]}-1}" >&2
        rm -f -- "${versions[@]:0:${#versions[@]}-1}"
    fi
done

total_kib="$(du -sk --apparent-size -- *.deb | awk '{s += $1} END {print s}')"
count="$(compgen -G '*.deb' | wc -l)"
awk -v n="$count" -v k="$total_kib" -v d="$dest" 'BEGIN {printf "fetch-slurm-debs: %d packages, %.1f MiB in %s\n", n, k / 1024, d}'
((total_kib <= MAX_MIB * 1024)) ||
    die "the debs take $((total_kib / 1024)) MiB, over the ${MAX_MIB} MiB budget (the device tool carries 64 MiB in all, .whl/ included)"
