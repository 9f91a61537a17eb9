#!/usr/bin/env bash
# A real single-node Slurm 24.11 (Debian 13's packages) beside the 22.05 of
# tools/local-slurm.sh, on the same Debian 12 machine, at the same time.
#
#   tools/local-slurm-root.sh start|stop|status|env|config|stop-daemon NAME|start-daemon NAME|dbd-set|priority-set
#   (the same as LOCAL_SLURM_VERSION=24.11 tools/local-slurm.sh ...)
#
# Debian 13's Slurm needs a newer C library than Debian 12 has, so `start` makes a Debian 13
# root with debootstrap (--variant=minbase) under the state dir, installs slurmctld, slurmd,
# slurmdbd, slurm-client, munge and mariadb-server in it, and runs every daemon chrooted
# there. The configuration and the daemon steps are tools/local-slurm.sh's own (this file
# sources it): the same node (128 CPUs, 1 TiB, 16 fake GPUs), the same accounting settings,
# accounts and partitions; only the names below differ. Nothing of 22.05 is touched.
#
# Side by side with 22.05 (both at once, so CI runs their tests at the same time):
#   state dir    $LOCAL_SLURM_2411_DIR, default /var/lib/throughput-local-slurm-2411
#                (its own variable: a shell that evaluated 22.05's `env` has LOCAL_SLURM_DIR)
#   ports        slurmctld 6917, slurmd 6918, slurmdbd 6919, MariaDB 3308; cluster local2411
#   job ids      from 24110001, so that the two clusters' ids never meet: an scancel or
#                squeue sent to the wrong Slurm finds nothing rather than someone else's job
#   cgroups      v1, the host's: 24.11 puts jobs under slurm_<node>/, 22.05 under slurm/
#   munge        its own munged, key and socket, inside the root
#
# Mounts: all of them live in a private mount namespace (persisted at <state>/ns/mnt) that
# the daemons and the command wrappers enter with nsenter. The host sees none of them, so
# `rm -rf` of the state dir or of the root can never walk into /work or /root through a bind
# mount. In that namespace the root gets /proc, /sys (the host's cgroups), /dev, a /run
# tmpfs, and, at the same paths, what jobs need from the host: /work (the checkouts and their
# .venv), /root (uv's and pyenv's Pythons, uv's cache), /tmp (pytest's folders) and the
# state dir.
#
# Login node: <state>/bin holds sbatch, squeue, sacct, scontrol, scancel, sinfo, sacctmgr
# (and the other clients) as wrappers that run the root's command in the current folder;
# `eval "$(tools/local-slurm-root.sh env)"` puts them first on PATH. Inside the root (a job
# calling squeue) the same wrappers run the command directly.
set -euo pipefail

TOOLS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOCAL_SLURM_DIR="${LOCAL_SLURM_2411_DIR:-/var/lib/throughput-local-slurm-2411}"
# Real GPUs and offline packages are 22.05's business (the GPU machine); 24.11 is for tests.
LOCAL_SLURM_GPUS=fake
LOCAL_SLURM_OFFLINE_DEBS=""
# shellcheck source=local-slurm.sh
source "$TOOLS/local-slurm.sh"
# Relative paths in arguments are not used; daemons should not hold a checkout's folder.
cd /

VERSION=24.11
SUITE=trixie
MIRROR="${LOCAL_SLURM_2411_MIRROR:-http://deb.debian.org/debian}"
MYSQL_PORT=3308
SLURMCTLD_PORT=6917
SLURMD_PORT=6918
DBD_PORT=6919
FIRST_JOB_ID=24110001
CLUSTER=local2411
ROOT="$STATE_DIR/root"
NS_DIR="$STATE_DIR/ns"
NS="$NS_DIR/mnt"
BIN="$STATE_DIR/bin"
MARKER=/etc/throughput-local-slurm-root # inside the root: "you are in it"
# libffi8: the project's Python (pyenv's, built on Debian 12) needs it for ctypes in jobs.
PACKAGES=(slurmctld slurmd slurmdbd slurm-client munge mariadb-server libffi8)
# What the root sees from the host, at the same paths: the checkouts and their .venv (/work,
# and this checkout wherever it is), the Pythons those point at (pyenv's and uv's under
# /root), pytest's folders (/tmp) and the state dir.
REPO="$(cd "$TOOLS/.." && pwd)"
HOST_BINDS=(/work /root /tmp "$STATE_DIR")
case "$REPO/" in /work/* | /root/* | /tmp/*) ;; *) HOST_BINDS+=("$REPO") ;; esac
NEED_MB=1500 # debootstrap (214 MB) and the packages (about 850 MB), with room for logs

# --- the root and its mount namespace ----------------------------------------------------

ns_alive() { [[ -e "$NS" ]] && nsenter --mount="$NS" -- test -e "$ROOT/proc/self" 2>/dev/null; }

# ns_up: the private namespace with the root's mounts (idempotent). A namespace outlives its
# daemons (its file is a mount on the host), so one made from another checkout can still be
# alive, without this checkout's folder: the folders it lacks are bound into it, and where a
# host folder cannot be seen from it (a mount made on the host after it), it is made anew.
ns_up() {
    if ns_alive; then
        ns_bind_missing
        ns_binds_ok && return 0
        daemons_running &&
            die "Slurm $VERSION's namespace cannot be given $(ns_unseen) while its daemons run (a mount made on the host after it?): stop Slurm $VERSION and start it again"
        log "making the root's namespace anew: it cannot see $(ns_unseen)"
    fi
    ns_down
    mkdir -p "$NS_DIR"
    # A namespace file can only be bind-mounted on a private mount: make NS_DIR one.
    mounted "$NS_DIR" || mount --bind "$NS_DIR" "$NS_DIR"
    mount --make-private "$NS_DIR"
    touch "$NS"
    unshare --mount="$NS" --propagation private true || die "unshare --mount failed (needs root and util-linux)"
    nsenter --mount="$NS" -- /bin/bash -euc '
        root=$1; shift
        mount -t proc proc "$root/proc"
        mount --rbind /sys "$root/sys"
        mount --rbind /dev "$root/dev"
        mount -t tmpfs -o mode=755 tmpfs "$root/run"
        mkdir -p "$root/run/munge" "$root/run/mysqld" "$root/run/slurm"
        for b in "$@"; do mkdir -p "$root$b"; mount --bind "$b" "$root$b"; done
    ' sh "$ROOT" "${HOST_BINDS[@]}" || die "cannot mount the root's file systems in its namespace"
}

# same_inode PATH: the host's PATH is what the root sees at PATH (a bind shares device and inode).
same_inode() {
    [[ "$(stat -L -c %d:%i "$1" 2>/dev/null)" == "$(nsenter --mount="$NS" -- stat -L -c %d:%i "$ROOT$1" 2>/dev/null)" ]]
}

ns_unseen() {
    local b out=()
    for b in "${HOST_BINDS[@]}"; do same_inode "$b" || out+=("$b"); done
    echo "${out[*]}"
}

ns_binds_ok() { [[ -z "$(ns_unseen)" ]]; }

# ns_bind_missing: each folder the root should see and does not, bound from the namespace's
# own view of the host (the same file system, where no later host mount hides it). A bind of
# a folder since deleted (a checkout removed and cloned again at the same path) is taken
# away first: nothing can be mounted on it.
ns_bind_missing() {
    local b
    for b in "${HOST_BINDS[@]}"; do
        same_inode "$b" && continue
        nsenter --mount="$NS" -- /bin/sh -c '
            test -d "$1" || exit 0
            while umount -l "$2$1" 2>/dev/null; do :; done
            mkdir -p "$2$1" && mount --bind "$1" "$2$1"' sh "$b" "$ROOT" 2>/dev/null || true
    done
}

daemons_running() {
    local f
    for f in "$RUN/slurmctld.pid" "$RUN/slurmd.pid" "$RUN/slurmdbd.pid" "$MYSQL_RUN/mysqld.pid" "$RUN/munged.pid"; do
        pid_alive "$f" && return 0
    done
    return 1
}

# mounted PATH: PATH is a mount point on the host (a file, too: the namespace's).
mounted() { awk -v p="$1" '$5 == p {found = 1} END {exit !found}' /proc/self/mountinfo; }

ns_down() {
    if mounted "$NS"; then umount "$NS" || umount -l "$NS"; fi
    if mounted "$NS_DIR"; then umount "$NS_DIR" || umount -l "$NS_DIR"; fi
}

# in_root CMD...: CMD inside the root, in its namespace.
in_root() { nsenter --mount="$NS" -- chroot "$ROOT" "$@"; }

# chown runs in the root: munge's and mysql's uids there differ from the host's.
chown() { in_root chown "$@"; }

check_space() {
    local need=$1 avail
    mkdir -p "$STATE_DIR"
    avail="$(df -Pm "$STATE_DIR" | awk 'NR == 2 {print $4}')"
    ((avail >= need)) || die "only ${avail} MB free under $STATE_DIR; Slurm $VERSION's root needs ${need} MB"
}

make_root() {
    [[ -f "$ROOT/.debootstrap-done" ]] && return 0
    check_space "$NEED_MB"
    if ! command -v debootstrap >/dev/null 2>&1; then
        log "installing debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends debootstrap \
            >"$LOG/debootstrap-install.log" 2>&1 ||
            die "apt-get install debootstrap failed (see $LOG/debootstrap-install.log)"
    fi
    log "making a Debian 13 root in $ROOT (debootstrap --variant=minbase $SUITE)"
    ns_down
    rm -rf "$ROOT.partial"
    debootstrap --variant=minbase "$SUITE" "$ROOT.partial" "$MIRROR" >"$LOG/debootstrap.log" 2>&1 ||
        die "debootstrap $SUITE from $MIRROR failed (archive unreachable? no space?): see $LOG/debootstrap.log"
    rm -rf "$ROOT"
    mv "$ROOT.partial" "$ROOT"
    touch "$ROOT/.debootstrap-done"
}

# install_packages (replaces local-slurm.sh's): the root, its namespace, Slurm in it, and
# the wrappers through which this script and its users call the root's commands.
install_packages() {
    mkdir -p "$LOG"
    make_root
    cp /etc/hosts "$ROOT/etc/hosts" # the node's name must resolve as on the host
    cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
    printf 'Slurm %s root of tools/local-slurm-root.sh\n' "$VERSION" >"$ROOT$MARKER"
    ns_up
    # The stamp lists what was installed, so that a package added here is installed next start.
    if [[ "$(cat "$ROOT/.packages-done" 2>/dev/null)" != "${PACKAGES[*]}" ]]; then
        check_space "$NEED_MB"
        log "installing ${PACKAGES[*]} in the root"
        printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
        chmod 755 "$ROOT/usr/sbin/policy-rc.d"
        {
            in_root env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
                in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"
        } >"$LOG/apt-root.log" 2>&1 ||
            die "apt-get install in the $SUITE root failed (archive unreachable? no space?): see $LOG/apt-root.log"
        echo "${PACKAGES[*]}" >"$ROOT/.packages-done"
    fi
    make_wrappers
    in_root id mysql >/dev/null 2>&1 || die "user mysql missing in the root (mariadb-server not installed?)"
    local got
    got="$(in_root slurmctld -V 2>&1 || true)"
    [[ "$got" == *" $VERSION."* ]] || die "the root's slurmctld -V says '$got', not $VERSION"
}

# make_wrappers: one script per command in $BIN; outside the root it enters the namespace and
# the root and runs the command in the same folder (which must be visible there). Each is
# renamed into place: a `start` while tests run must not take a wrapper away under them.
make_wrappers() {
    local name path
    mkdir -p "$BIN"
    for name in sacct sacctmgr salloc sattach sbatch sbcast scancel scontrol sdiag sinfo sprio \
        squeue sreport srun sshare sstat strigger slurmctld slurmd slurmdbd munge unmunge munged \
        mariadb mariadb-admin mariadbd mariadb-install-db; do
        path=""
        [[ -e "$ROOT/usr/bin/$name" ]] && path=/usr/bin/$name
        [[ -e "$ROOT/usr/sbin/$name" ]] && path=/usr/sbin/$name
        [[ -n "$path" ]] || die "$name is missing from the root (packages incomplete: rm $ROOT/.packages-done and start again)"
        cat >"$BIN/.$name.tmp" <<EOF
#!/bin/sh
# Written by tools/local-slurm-root.sh: Slurm $VERSION's $name, run in its Debian 13 root.
SLURM_CONF='$SLURM_CONF_FILE'
export SLURM_CONF
if [ -e '$MARKER' ]; then exec '$path' "\$@"; fi
exec nsenter --mount='$NS' -- chroot '$ROOT' /bin/sh -c 'cd "\$1" 2>/dev/null || { echo "$name (Slurm $VERSION): folder \$1 is not visible in its root (only ${HOST_BINDS[*]} are)" >&2; exit 1; }; shift; exec "\$@"' sh "\$PWD" '$path' "\$@"
EOF
        chmod 755 "$BIN/.$name.tmp"
        mv -f "$BIN/.$name.tmp" "$BIN/$name"
    done
    export PATH="$BIN:$PATH"
}

# link_etc_slurm_conf (replaces local-slurm.sh's): the root's /etc/slurm/slurm.conf, never
# the host's (that one is 22.05's).
link_etc_slurm_conf() {
    mkdir -p "$ROOT/etc/slurm"
    ln -sfn "$SLURM_CONF_FILE" "$ROOT/etc/slurm/slurm.conf"
}

# check_state_dir: refuse a state dir that holds another Slurm (22.05's, say).
check_state_dir() {
    if [[ -f "$ETC/slurm.conf" && "$(cat "$STATE_DIR/version" 2>/dev/null)" != "$VERSION" ]]; then
        die "$STATE_DIR holds another Slurm's state (no version file saying $VERSION); set LOCAL_SLURM_2411_DIR"
    fi
    mkdir -p "$STATE_DIR"
    echo "$VERSION" >"$STATE_DIR/version"
}

# --- subcommands -------------------------------------------------------------------------

# The clients, whether or not this run made the wrappers.
if [[ -d "$BIN" ]]; then export PATH="$BIN:$PATH"; fi

root_start() {
    [[ $EUID -eq 0 ]] || die "must run as root (it makes a root, mounts and runs daemons)"
    check_state_dir
    # After a stop (or a reboot) the namespace is gone: cmd_start's quick check would
    # otherwise run the wrappers against nothing.
    if ns_alive && [[ "$(cat "$ROOT/.packages-done" 2>/dev/null)" == "${PACKAGES[*]}" ]]; then
        ns_up # this checkout's folder, where the namespace was made from another
    else
        install_packages
    fi
    cmd_start
    check_venv_python
}

# check_venv_python: jobs run this checkout's .venv/bin/python inside the root, so the Python
# it points at must live under a bound path and run with Debian 13's libraries. A venv made
# from Debian 12's /usr/bin/python3.11 cannot (the root has no such file).
check_venv_python() {
    local venv="$REPO/.venv/bin/python" real
    [[ -e "$venv" ]] || return 0
    real="$(readlink -f "$venv")"
    in_root "$venv" -c 'import ctypes, ssl, sqlite3, lzma, bz2' >/dev/null 2>&1 ||
        die "$venv ($real) does not run in the Debian 13 root: make the venv from a Python under /root (pyenv, or uv python install 3.11 && uv sync --python-preference only-managed)"
}

root_stop() {
    # By pid files, so daemons are stopped whether or not their namespace is still there.
    cmd_stop
    ns_down
}

root_env() {
    printf 'export LOCAL_SLURM_VERSION=%q\n' "$VERSION"
    printf 'export LOCAL_SLURM_2411_DIR=%q\n' "$STATE_DIR"
    printf 'export SLURM_CONF=%q\n' "$SLURM_CONF_FILE"
    printf 'export PATH=%q${PATH:+:$PATH}\n' "$BIN"
}

root_status() {
    ns_alive || {
        echo "local-slurm $VERSION: not running (no namespace at $NS)" >&2
        return 1
    }
    cmd_status
}

case "${1:-}" in
start) root_start ;;
stop) root_stop ;;
status) root_status ;;
env) root_env ;;
config) cmd_config ;;
stop-daemon) cmd_stop_daemon "${2:-}" ;;
start-daemon) cmd_start_daemon "${2:-}" ;;
dbd-set) shift && cmd_dbd_set "$@" ;;
priority-set) cmd_priority_set "${2:-}" ;;
*)
    echo "usage: $0 {start|stop|status|env|config|stop-daemon NAME|start-daemon NAME|dbd-set [OPTION=VALUE...]|priority-set multifactor|basic}" >&2
    exit 2
    ;;
esac
