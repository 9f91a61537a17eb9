#!/usr/bin/env bash
# A real single-node Slurm (22.05 from Debian 12) for tests, demos and CI.
#
#   tools/local-slurm.sh start    install what is missing, start everything, wait for the node
#   tools/local-slurm.sh stop     stop slurmd, slurmctld, slurmdbd, MariaDB, munged
#   tools/local-slurm.sh status   exit 0 only if sinfo answers and sacct works
#   tools/local-slurm.sh env      shell lines to eval: eval "$(tools/local-slurm.sh env)"
#   tools/local-slurm.sh stop-daemon NAME    stop one daemon (slurmctld, slurmdbd or slurmd)
#   tools/local-slurm.sh dbd-set [OPT=VAL..] slurmdbd.conf site options for a test (none: restore)
#   tools/local-slurm.sh start-daemon NAME   start it again, as `start` does (fault tests)
#   tools/local-slurm.sh priority-set multifactor|basic   PriorityType for the budget tests (basic: restore)
#   tools/local-slurm.sh gpu-type-set TYPE|none   typed GPUs, accounted by type alone (none: restore)
#   tools/local-slurm.sh start --offline DIR   start from the .debs in DIR (see "Offline" below)
#   tools/local-slurm.sh unpack --offline DIR  only unpack them and check their libraries (ldd)
#   tools/local-slurm.sh config   write the config into a state dir that is not running, print it
#
# LOCAL_SLURM_VERSION=24.11 (default 22.05): every subcommand acts on Slurm 24.11 instead,
# run from a Debian 13 root by tools/local-slurm-root.sh, which reuses this file's config
# generator and daemon steps (it sources this file).
#
# Must run as root on Debian 12 without systemd: daemons are started directly.
# All config, state, logs, pid files, the munge key and the MariaDB datadir live under
# one state dir, $LOCAL_SLURM_DIR (default /var/lib/throughput-local-slurm), so several
# checkouts share one cluster and `rm -rf` of that dir is a full reset.
#
# Config lookup: the daemons are started with SLURM_CONF=<state>/etc/slurm.conf (Slurm
# finds gres.conf, cgroup.conf and slurmdbd.conf next to it). For clients, `env` prints
# `export SLURM_CONF=...`; in addition, /etc/slurm/slurm.conf is made a symlink to ours
# when it is absent or already a symlink, so plain `sbatch`/`squeue`/`sacct` work in any
# shell. A real /etc/slurm/slurm.conf file is never touched.
#
# The node is declared far bigger than the machine (SlurmdParameters=config_overrides):
# 128 CPUs, 1 TiB, 16 fake GPUs, so exactly 16 jobs of --gpus=1 --cpus-per-task=8
# --mem=64G run at once and a 17th waits: more than the campaign controller's
# max_concurrent_jobs (12), so that only the watcher keeps a campaign at 12 and a test of
# that limit can fail. The limits are nominal; the jobs themselves are small.
#
# Real GPUs (LOCAL_SLURM_GPUS=auto|real|fake, default auto: real when `nvidia-smi -L` lists
# GPUs): the node declares the GPUs nvidia-smi lists, each with its own /dev/nvidiaN in
# gres.conf, and 8 CPUs and 64 GiB per GPU, so exactly as many --gpus=1 --cpus-per-task=8
# --mem=64G jobs run at once as there are GPUs. Slurm binds one GPU per job: with a usable
# cgroup hierarchy (LOCAL_SLURM_CGROUP=auto|v1|v2|none) through ConstrainDevices=yes, so
# the job sees only its GPU; with none, through CUDA_VISIBLE_DEVICES alone.
#
# Offline (a machine without network and without Slurm, such as the lent H200 on Ubuntu
# 24.04): `LOCAL_SLURM_OFFLINE_DEBS=DIR tools/local-slurm.sh start` (or `start --offline
# DIR`) unpacks the Debian 12 packages that tools/fetch-slurm-debs.sh downloaded into DIR
# with `dpkg -x` under <state>/offline/root (no maintainer scripts run), links the commands
# (Debian's slurmctld-wlm, slurmd-wlm and slurmstepd-wlm under their plain names) into
# <state>/offline/bin, creates the users munge, mysql and slurm if absent, and starts the
# same daemons with the same configuration, plus the paths the packages' compiled-in
# defaults would get wrong (PluginDir, MariaDB's basedir, slurmd -d). Once unpacked, every
# subcommand finds the tree by itself, and `env` also prints PATH and LD_LIBRARY_PATH.
# `unpack` does the unpacking and an ldd check only, and starts nothing.
set -euo pipefail

case "${LOCAL_SLURM_VERSION:-22.05}" in
22.05) ;;
24.11) if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then exec "$(dirname "$0")/local-slurm-root.sh" "$@"; fi ;;
*) printf '[local-slurm] ERROR: LOCAL_SLURM_VERSION=%s: 22.05 or 24.11\n' "$LOCAL_SLURM_VERSION" >&2; exit 2 ;;
esac

STATE_DIR="${LOCAL_SLURM_DIR:-/var/lib/throughput-local-slurm}"
ETC="$STATE_DIR/etc"
LOG="$STATE_DIR/log"
RUN="$STATE_DIR/run"
SLURM_CONF_FILE="$ETC/slurm.conf"
MUNGE_SOCKET="$RUN/munge.socket"
MYSQL_RUN="$STATE_DIR/mysql-run" # owned by mysql: socket and pid file
MYSQL_SOCKET="$MYSQL_RUN/mysqld.sock"
MYSQL_PORT=3307
# Slurm's default ports; tools/local-slurm-root.sh moves 24.11's beside them.
SLURMCTLD_PORT=6817
SLURMD_PORT=6818
DBD_PORT=6819
FIRST_JOB_ID=1
DB_USER=slurm
DB_PASS=slurm-local-only # MariaDB listens on 127.0.0.1 only
CLUSTER=local
ACCOUNT=throughput
PARTITION=gpu
SHORT_PARTITION=short
URGENT_PARTITION=urgent
LIMITED_ACCOUNT=limited
THROTTLED_ACCOUNT=throttled
PLAIN_USER=sweeper
NODE="$(hostname -s)"
START_TIMEOUT="${LOCAL_SLURM_START_TIMEOUT:-60}"
GPU_MODE="${LOCAL_SLURM_GPUS:-auto}"
CGROUP_MODE="${LOCAL_SLURM_CGROUP:-auto}"
# Offline mode: the unpacked packages, the command links and a stamp of what was unpacked.
OFFLINE_DEBS="${LOCAL_SLURM_OFFLINE_DEBS:-}"
OFFLINE_DIR="$STATE_DIR/offline"
OFFLINE_ROOT="$OFFLINE_DIR/root"
OFFLINE_BIN="$OFFLINE_DIR/bin"
OFFLINE_LIBS="$OFFLINE_ROOT/usr/lib/x86_64-linux-gnu/slurm-wlm:$OFFLINE_ROOT/usr/lib/x86_64-linux-gnu:$OFFLINE_ROOT/lib/x86_64-linux-gnu"
GPU_FILES=() # the /dev/nvidiaN files gres.conf names (real GPUs only)

export SLURM_CONF="$SLURM_CONF_FILE"

log() { printf '[local-slurm] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# --- process helpers (pid files, never process names) ----------------------------------

# pid_alive PIDFILE: true if the pid in PIDFILE is a live process.
pid_alive() {
    local pid
    [[ -s "$1" ]] || return 1
    pid="$(tr -dc '0-9' <"$1")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null
}

# stop_pid NAME PID: SIGTERM, wait up to 20 s, then SIGKILL.
stop_pid() {
    local name="$1" pid="$2" i
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 200; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "$name did not exit after SIGTERM; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
}

# strays NAME: pids of this installation's Slurm daemon NAME that its pid file does not name
# (a daemon restarted while the old one still held the port writes its pid and then exits,
# leaving the old one running unnamed). This installation's daemons are told apart from the
# other version's by the SLURM_CONF they were started with, never by process name alone.
strays() {
    local name="$1" pidfile="$2" named="" p
    [[ -s "$pidfile" ]] && named="$(tr -dc '0-9' <"$pidfile")"
    for p in $(pgrep -x "$name" 2>/dev/null || true); do
        [[ "$p" == "$named" ]] && continue
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$SLURM_CONF_FILE" && echo "$p"
    done
    return 0
}

# stop_pidfile NAME PIDFILE: stop the daemon PIDFILE names and any stray of the same Slurm
# daemon; remove the pid file.
stop_pidfile() {
    local name="$1" pidfile="$2" pid
    case "$name" in
    slurmctld | slurmd | slurmdbd) for pid in $(strays "$name" "$pidfile"); do stop_pid "stray $name" "$pid"; done ;;
    esac
    if pid_alive "$pidfile"; then stop_pid "$name" "$(tr -dc '0-9' <"$pidfile")"; fi
    rm -f "$pidfile"
}

# wait_for DESCRIPTION SECONDS CMD...: retry CMD until it succeeds or SECONDS pass
# (a wall-clock deadline: a failing Slurm client can itself take seconds per try).
wait_for() {
    local what="$1" secs="$2" deadline
    shift 2
    deadline=$((SECONDS + secs))
    while ((SECONDS < deadline)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    fail_with_logs "timed out after ${secs}s waiting for $what"
}

fail_with_logs() {
    log "ERROR: $*"
    local f
    for f in "$LOG"/*.log; do
        [[ -f "$f" ]] || continue
        printf '\n===== tail of %s =====\n' "$f" >&2
        tail -n 25 "$f" >&2 || true
    done
    exit 1
}

# --- installation ----------------------------------------------------------------------

install_packages() {
    local missing=0 c
    for c in slurmctld slurmd slurmdbd sbatch sacct sacctmgr munged mariadbd mariadb-install-db; do
        command -v "$c" >/dev/null 2>&1 || missing=1
    done
    ((missing)) || return 0
    log "installing Slurm, munge and MariaDB from Debian"
    # policy-rc.d exiting 101 keeps the packages' init scripts from starting daemons with
    # Debian's default config (which would take the ports and sockets we want).
    local created_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        created_policy=1
    fi
    local rc=0
    {
        DEBIAN_FRONTEND=noninteractive apt-get update -q &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
                slurmctld slurmd slurm-client slurmdbd munge mariadb-server
    } || rc=$?
    ((created_policy)) && rm -f /usr/sbin/policy-rc.d
    ((rc == 0)) || die "apt-get install failed (exit $rc)"
    command -v mariadbd >/dev/null || die "mariadbd not found after install"
    id mysql >/dev/null 2>&1 || die "user mysql missing (mariadb-server not installed?)"
}

# --- offline mode: packages unpacked, not installed ---------------------------------------

# offline: true when this state dir runs from unpacked packages (asked for now, or unpacked
# by an earlier start, so that stop/status/env need no variable).
offline() { [[ -n "$OFFLINE_DEBS" || -f "$OFFLINE_DIR/stamp" ]]; }

# use_offline_paths: this script, and the daemons it starts, find the unpacked commands
# and libraries first.
use_offline_paths() {
    case ":$PATH:" in *":$OFFLINE_BIN:"*) return 0 ;; esac
    export PATH="$OFFLINE_BIN:$PATH"
    export LD_LIBRARY_PATH="$OFFLINE_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# unpack_debs: dpkg -x every .deb in $OFFLINE_DEBS into $OFFLINE_ROOT, once per set of
# files (the stamp lists names and sizes), then make the command links again.
unpack_debs() {
    [[ -d "$OFFLINE_DEBS" ]] || die "offline packages folder '$OFFLINE_DEBS' not found (make it with tools/fetch-slurm-debs.sh on Debian 12 and carry it)"
    local debs=("$OFFLINE_DEBS"/*.deb) stamp deb
    [[ -e "${debs[0]}" ]] || die "no .deb files in $OFFLINE_DEBS (run tools/fetch-slurm-debs.sh on Debian 12)"
    command -v dpkg >/dev/null 2>&1 || die "dpkg not found: the offline mode unpacks .deb files with dpkg -x"
    stamp="$(for deb in "${debs[@]}"; do printf '%s %s\n' "$(basename "$deb")" "$(stat -c %s "$deb")"; done)"
    if [[ ! -f "$OFFLINE_DIR/stamp" || "$(cat "$OFFLINE_DIR/stamp")" != "$stamp" ]]; then
        log "unpacking ${#debs[@]} packages from $OFFLINE_DEBS into $OFFLINE_ROOT"
        rm -rf "$OFFLINE_ROOT" "$OFFLINE_DIR/stamp"
        mkdir -p "$OFFLINE_ROOT"
        for deb in "${debs[@]}"; do
            dpkg -x "$deb" "$OFFLINE_ROOT" || die "dpkg -x $deb failed"
        done
        printf '%s\n' "$stamp" >"$OFFLINE_DIR/stamp"
    fi
    make_offline_links
}

# make_offline_links: a bin dir with only the commands this script and its users call, so
# that the packages' other programs (mariadb-client's `replace`, say) shadow nothing on
# PATH. Debian ships the Slurm daemons as *-wlm; the plain names are alternatives links
# that only the postinst script (which dpkg -x does not run) would make.
make_offline_links() {
    local r="$OFFLINE_ROOT" name target
    rm -rf "$OFFLINE_BIN"
    mkdir -p "$OFFLINE_BIN"
    # slurm-client's commands, slurmdbd, munge's and MariaDB's.
    for name in sacct sacctmgr salloc sattach sbatch sbcast scancel scontrol sdiag sinfo sprio \
        squeue sreport srun sshare sstat strigger slurmdbd munge unmunge munged \
        mariadb mariadb-admin mariadbd mariadb-install-db my_print_defaults; do
        for target in "$r/usr/bin/$name" "$r/usr/sbin/$name"; do
            if [[ -e "$target" ]]; then ln -sfn "$target" "$OFFLINE_BIN/$name"; fi
        done
        [[ -e "$OFFLINE_BIN/$name" ]] || die "$name is not in the unpacked packages ($OFFLINE_DEBS incomplete? run tools/fetch-slurm-debs.sh)"
    done
    ln -sfn "$r/usr/sbin/slurmctld-wlm" "$OFFLINE_BIN/slurmctld"
    ln -sfn "$r/usr/sbin/slurmd-wlm" "$OFFLINE_BIN/slurmd"
    # slurmd runs slurmstepd from the path given with -d. This wrapper sets LD_LIBRARY_PATH
    # itself, so that steps start whether or not slurmd passes its environment on, and runs
    # Debian's slurmstepd-wlm under the name slurmstepd: Slurm decides which daemon it is
    # by its program name (run_in_daemon compares it with "slurmstepd"). Run as
    # slurmstepd-wlm, the step daemon skips its accounting setup and then dereferences a
    # NULL list in the first poll (SIGSEGV in jag_common_poll_data, seen on the lent H200;
    # the job hangs with "_exec_wait_child_wait_for_parent: failed"), and puts its cgroups
    # under slurmd's. `exec -a` needs bash.
    printf '#!/bin/bash\n# Written by tools/local-slurm.sh (offline mode): Debian'"'"'s slurmstepd-wlm, named slurmstepd, with its libraries.\nexport LD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"\nexec -a slurmstepd "%s" "$@"\n' \
        "$OFFLINE_LIBS" "$r/usr/sbin/slurmstepd-wlm" >"$OFFLINE_BIN/slurmstepd"
    chmod 755 "$OFFLINE_BIN/slurmstepd"
}

# check_offline_libs: ldd every linked command and every Slurm plugin with the offline
# library path; print each library that is not found, and fail if any is missing.
check_offline_libs() {
    local f missing=0 out n=0
    for f in "$OFFLINE_BIN"/* "$OFFLINE_ROOT"/usr/sbin/slurmstepd-wlm \
        "$OFFLINE_ROOT"/usr/lib/x86_64-linux-gnu/slurm-wlm/*.so; do
        f="$(readlink -f "$f")"
        # Scripts (mariadb-install-db, the slurmstepd wrapper) have no libraries of their own.
        [[ "$(head -c 4 "$f" | tail -c 3)" == ELF ]] || continue
        n=$((n + 1))
        out="$(LD_LIBRARY_PATH="$OFFLINE_LIBS" ldd "$f" 2>&1 | grep 'not found' || true)"
        if [[ -n "$out" ]]; then
            missing=1
            printf 'ldd %s:\n%s\n' "$f" "$out" >&2
        fi
    done
    ((missing == 0)) || die "libraries missing for the unpacked packages (ldd lines above)"
    log "ldd: every library of the $n unpacked programs and Slurm plugins is found"
}

# ensure_users: mariadbd runs as mysql; munge and slurm exist as on an installed system.
# dpkg -x runs no maintainer script, so nothing else creates them.
ensure_users() {
    local u
    for u in munge mysql slurm; do
        id "$u" >/dev/null 2>&1 && continue
        log "creating system user $u"
        useradd --system --user-group --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin "$u" || die "useradd $u failed"
    done
}

# ensure_hostname_resolves: Slurm looks the node and the controller up by name, and a lent
# VM's host name may not resolve.
ensure_hostname_resolves() {
    getent hosts "$NODE" >/dev/null 2>&1 && return 0
    log "adding '127.0.0.1 $NODE' to /etc/hosts (the host name does not resolve)"
    printf '127.0.0.1 %s\n' "$NODE" >>/etc/hosts || die "cannot add $NODE to /etc/hosts"
}

cmd_unpack() {
    [[ -n "$OFFLINE_DEBS" ]] || die "usage: LOCAL_SLURM_OFFLINE_DEBS=DIR $0 unpack (or: $0 unpack --offline DIR)"
    unpack_debs
    use_offline_paths
    check_offline_libs
    log "slurmctld -V: $(slurmctld -V 2>&1)"
    log "mariadbd --version: $(mariadbd --version 2>&1)"
}

# --- GPUs and cgroups --------------------------------------------------------------------

# real_gpus: true when the node declares the machine's real GPUs.
real_gpus() {
    case "$GPU_MODE" in
    real) return 0 ;;
    fake) return 1 ;;
    # grep -c reads all of nvidia-smi's output (grep -q could end it with SIGPIPE under pipefail).
    auto) command -v nvidia-smi >/dev/null 2>&1 && (($(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true) > 0)) ;;
    *) die "LOCAL_SLURM_GPUS=$GPU_MODE: auto, real or fake" ;;
    esac
}

# gpu_minors: one /dev/nvidia minor number per GPU, in nvidia-smi's index order. The minor
# is usually the index; nvidia-smi -q says so for sure.
gpu_minors() {
    local n minors
    command -v nvidia-smi >/dev/null 2>&1 || die "LOCAL_SLURM_GPUS=real but nvidia-smi is not on PATH"
    n="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
    ((n > 0)) || die "nvidia-smi -L lists no GPU"
    minors="$(nvidia-smi -q 2>/dev/null | awk -F: '/Minor Number/ {gsub(/[ \t]/, "", $2); print $2}')"
    if [[ "$(grep -c '^[0-9][0-9]*$' <<<"$minors")" -eq "$n" ]]; then
        printf '%s\n' "$minors"
    else
        seq 0 $((n - 1))
    fi
}

# cgroup_version: v2, v1 or none: what is mounted now (for LOCAL_SLURM_CGROUP=auto).
cgroup_version() {
    if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
        echo v2
    elif [[ -d /sys/fs/cgroup/devices && -d /sys/fs/cgroup/freezer && -d /sys/fs/cgroup/memory ]]; then
        echo v1
    else
        echo none
    fi
}

# mount_cgroup2_if_absent: a VM without systemd may have cgroup2 in its kernel but nothing
# mounted; mount it so that Slurm can bind devices. Only for real GPUs at start.
mount_cgroup2_if_absent() {
    [[ "$CGROUP_MODE" == auto && "$(cgroup_version)" == none ]] || return 0
    grep -qw cgroup2 /proc/filesystems 2>/dev/null || return 0
    if mkdir -p /sys/fs/cgroup 2>/dev/null && mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null; then
        log "mounted cgroup2 on /sys/fs/cgroup (nothing was mounted there)"
    fi
}

# prepare_cgroup_v2: what systemd would have made. slurmd 22.05 with IgnoreSystemd=yes
# creates /sys/fs/cgroup/system.slice/<node>_slurmstepd.scope but not system.slice itself,
# and needs the cpu, cpuset and memory controllers enabled down to it (seen on the lent
# H200: "Controller cpuset is not enabled!", "Could not create scope directory").
prepare_cgroup_v2() {
    [[ "$(cgroup_version)" == v2 ]] || return 0
    local cg=/sys/fs/cgroup ctl want=""
    for ctl in cpuset cpu memory pids; do
        grep -qw "$ctl" "$cg/cgroup.controllers" && want+=" +$ctl"
    done
    mkdir -p "$cg/system.slice" || die "cannot create $cg/system.slice"
    if [[ -n "$want" ]]; then
        # One controller at a time: a write of several fails as a whole if one is refused.
        for ctl in $want; do
            echo "$ctl" >"$cg/cgroup.subtree_control" 2>/dev/null || log "note: cannot enable $ctl in $cg"
            echo "$ctl" >"$cg/system.slice/cgroup.subtree_control" 2>/dev/null || log "note: cannot enable $ctl in $cg/system.slice"
        done
    fi
    log "cgroup v2 prepared: $cg/system.slice, controllers:$(cat "$cg/system.slice/cgroup.subtree_control" | sed 's/^/ /')"
}

# gpu_cgroup: the cgroup version Slurm uses to bind real GPUs: v1, v2 or none.
gpu_cgroup() {
    case "$CGROUP_MODE" in
    auto) cgroup_version ;;
    v1 | v2 | none) echo "$CGROUP_MODE" ;;
    *) die "LOCAL_SLURM_CGROUP=$CGROUP_MODE: auto, v1, v2 or none" ;;
    esac
}

# --- configuration ---------------------------------------------------------------------

write_configs() {
    mkdir -p "$ETC" "$LOG" "$RUN" "$STATE_DIR/spool/ctld" "$STATE_DIR/spool/d" \
        "$STATE_DIR/munge" "$STATE_DIR/dev"
    # munged refuses group/other-writable dirs on the way to its socket and key.
    chmod 755 "$STATE_DIR" "$ETC" "$LOG" "$RUN"
    chmod 700 "$STATE_DIR/munge"

    # Fake GPUs: count-only GRES makes slurmd drop the GPUs and drain the node in 22.05,
    # so each GPU gets a File= that is a symlink to /dev/null.
    local i
    for i in $(seq 0 15); do
        ln -sfn /dev/null "$STATE_DIR/dev/nvidia$i"
    done

    # What differs between the fake GPUs (tests, CI) and the machine's real ones.
    local containment node_conf gres_conf cgroup_conf cg="" n minor
    containment="# Containment (cgroup v1 on the test machines); limits are nominal on this box.
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/cgroup"
    node_conf="# Declared far beyond the hardware: 16 concurrent --gpus=1 --cpus-per-task=8 --mem=64G jobs.
SlurmdParameters=config_overrides
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=128 RealMemory=1048576 Gres=gpu:16 State=UNKNOWN"
    gres_conf="NodeName=$NODE Name=gpu File=$STATE_DIR/dev/nvidia[0-15]"
    cgroup_conf="CgroupPlugin=cgroup/v1
ConstrainCores=no
ConstrainDevices=no
ConstrainRAMSpace=yes
ConstrainSwapSpace=no"
    if real_gpus; then
        # The real GPUs, each with its own device file, so that Slurm binds one per job.
        GPU_FILES=()
        while read -r minor; do GPU_FILES+=("/dev/nvidia$minor"); done < <(gpu_minors)
        n=${#GPU_FILES[@]}
        gres_conf="$(for i in "${GPU_FILES[@]}"; do printf 'NodeName=%s Name=gpu File=%s\n' "$NODE" "$i"; done)"
        # 8 CPUs and 64 GiB per GPU: exactly one --gpus=1 --cpus-per-task=8 --mem=64G job per
        # GPU, whatever the machine has. config_overrides: a VM's memory can start far below
        # its limit (the lent H200s grow MemTotal as memory is used).
        node_conf="# One --gpus=1 --cpus-per-task=8 --mem=64G job per real GPU ($n GPUs).
SlurmdParameters=config_overrides
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$((8 * n)) RealMemory=$((65536 * n)) Gres=gpu:$n State=UNKNOWN"
        cg="$(gpu_cgroup)"
        if [[ "$cg" == none ]]; then
            # No cgroup constraint: jobs are tracked by process and get their GPU through
            # CUDA_VISIBLE_DEVICES only; memory limits are not enforced.
            containment="# Containment: none (LOCAL_SLURM_CGROUP=none), so no device or memory constraint;
# each job gets its GPU through CUDA_VISIBLE_DEVICES.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux"
            cgroup_conf=""
            # slurmd 22.05 loads the cgroup plugin whatever the plugins above are: on cgroup
            # v2 without systemd it needs IgnoreSystemd, or it asks dbus for a scope and fails.
            if [[ "$(cgroup_version)" == v2 ]]; then
                cgroup_conf="CgroupPlugin=cgroup/v2
IgnoreSystemd=yes
ConstrainCores=no
ConstrainDevices=no
ConstrainRAMSpace=no
ConstrainSwapSpace=no"
            fi
        else
            containment="# Containment (cgroup $cg): a job sees only the GPU it was given (ConstrainDevices).
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/cgroup"
            cgroup_conf="CgroupPlugin=cgroup/$cg
ConstrainCores=no
ConstrainDevices=yes
ConstrainRAMSpace=yes
ConstrainSwapSpace=no"
            # Without systemd slurmd makes its own cgroup (no dbus scope).
            [[ "$cg" == v2 ]] && cgroup_conf+=$'\nIgnoreSystemd=yes'
        fi
    fi
    # Offline: the plugins are where dpkg -x put them, not at the compiled-in path.
    local plugin_dir=""
    if offline; then plugin_dir="PluginDir=$OFFLINE_ROOT/usr/lib/x86_64-linux-gnu/slurm-wlm"; fi

    cat >"$ETC/slurm.conf" <<EOF
# Written by tools/local-slurm.sh; edits are overwritten on the next start.
ClusterName=$CLUSTER
SlurmctldHost=$NODE
SlurmctldPort=$SLURMCTLD_PORT
SlurmdPort=$SLURMD_PORT
FirstJobId=$FIRST_JOB_ID
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE_DIR/spool/ctld
SlurmdSpoolDir=$STATE_DIR/spool/d
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MpiDefault=none
ReturnToService=2
$plugin_dir

$containment
JobAcctGatherFrequency=30

# Scheduling: start jobs within a second of sbatch.
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=1,sched_min_interval=0
# First in, first out, named: it is 22.05's default, but 24.11's is priority/multifactor
# (usage counted every 5 minutes). The budget tests switch it (priority-set).
PriorityType=priority/basic
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
KillWait=5
OverTimeLimit=0
MinJobAge=300

# Accounting through slurmdbd (Slurm 22.05 has no file-based storage that sacct reads).
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$NODE
AccountingStoragePort=$DBD_PORT
# For slurmdbd connections Slurm takes the munge socket from here, not from AuthInfo.
AccountingStoragePass=$MUNGE_SOCKET
AccountingStorageTRES=gres/gpu
AccountingStoreFlags=job_comment
# limits,qos: QOS limits (the restriction accounts below) are enforced, as on real clusters.
AccountingStorageEnforce=associations,limits,qos

# Preemption, as a shared cluster may do it: a job in partition $URGENT_PARTITION cancels
# the $PARTITION jobs it needs room from (the preemption test); nothing else preempts.
PreemptType=preempt/partition_prio
PreemptMode=CANCEL

GresTypes=gpu
$node_conf
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=UNLIMITED State=UP PriorityTier=1
# Restrictions of real clusters, each opt-in by naming it in a profile (see tools/README.md):
# a 5-minute MaxTime (a 14-minute job pends with PartitionTimeLimit), and a high-priority
# partition whose jobs preempt.
PartitionName=$SHORT_PARTITION Nodes=$NODE MaxTime=5 State=UP PriorityTier=1
PartitionName=$URGENT_PARTITION Nodes=$NODE MaxTime=UNLIMITED State=UP PriorityTier=10
EOF

    printf '%s\n' "$gres_conf" >"$ETC/gres.conf"
    if [[ -n "$cgroup_conf" ]]; then
        printf '%s\n' "$cgroup_conf" >"$ETC/cgroup.conf"
    else
        rm -f "$ETC/cgroup.conf"
    fi

    # slurmdbd refuses a slurmdbd.conf readable by others (it holds the DB password).
    (
        umask 077
        cat >"$ETC/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=$NODE
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$RUN/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$MYSQL_PORT
StorageUser=$DB_USER
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
$plugin_dir
EOF
    )
    chmod 600 "$ETC/slurmdbd.conf"

    cat >"$ETC/my.cnf" <<EOF
[mysqld]
user=mysql
datadir=$STATE_DIR/mysql
socket=$MYSQL_SOCKET
pid-file=$MYSQL_RUN/mysqld.pid
log-error=$LOG/mariadb.log
port=$MYSQL_PORT
bind-address=127.0.0.1
skip-name-resolve
innodb_buffer_pool_size=256M
innodb_log_file_size=64M
innodb_lock_wait_timeout=900
innodb_use_native_aio=0
EOF
    if offline; then
        # Offline: MariaDB's files are where dpkg -x put them, not under /usr.
        cat >>"$ETC/my.cnf" <<EOF
basedir=$OFFLINE_ROOT/usr
plugin-dir=$OFFLINE_ROOT/usr/lib/mysql/plugin
lc-messages-dir=$OFFLINE_ROOT/usr/share/mysql
character-sets-dir=$OFFLINE_ROOT/usr/share/mysql/charsets
EOF
    fi
}

# link_etc_slurm_conf: plain `sbatch` without SLURM_CONF finds our config (start only; the
# `config` subcommand writes into the state dir alone).
link_etc_slurm_conf() {
    # Plain `sbatch` without SLURM_CONF: point the default path at our config, but only
    # when nothing else owns it.
    mkdir -p /etc/slurm
    if [[ ! -e /etc/slurm/slurm.conf || -L /etc/slurm/slurm.conf ]]; then
        ln -sfn "$ETC/slurm.conf" /etc/slurm/slurm.conf
    else
        log "note: /etc/slurm/slurm.conf is a real file; use: eval \"\$($0 env)\""
    fi
}

# --- daemons, in dependency order --------------------------------------------------------

munge_ok() { munge -S "$MUNGE_SOCKET" -n </dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; }

start_munged() {
    if pid_alive "$RUN/munged.pid" && munge_ok; then return 0; fi
    stop_pidfile munged "$RUN/munged.pid"
    if [[ ! -s "$STATE_DIR/munge/munge.key" ]]; then
        (umask 077 && dd if=/dev/urandom of="$STATE_DIR/munge/munge.key" bs=1024 count=1 status=none)
    fi
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    log "starting munged"
    # Our own munged (own key and socket) runs beside any system munged without clashing.
    munged --force \
        --socket="$MUNGE_SOCKET" \
        --key-file="$STATE_DIR/munge/munge.key" \
        --pid-file="$RUN/munged.pid" \
        --log-file="$LOG/munged.log" \
        --seed-file="$STATE_DIR/munge/munged.seed" ||
        fail_with_logs "munged failed to start"
    wait_for "munged" 10 munge_ok
}

mysql_ok() { mariadb-admin --socket="$MYSQL_SOCKET" -u root ping; }

start_mariadb() {
    if pid_alive "$MYSQL_RUN/mysqld.pid" && mysql_ok >/dev/null 2>&1; then return 0; fi
    stop_pidfile mariadbd "$MYSQL_RUN/mysqld.pid"
    if [[ ! -d "$STATE_DIR/mysql/mysql" ]]; then
        log "initialising MariaDB datadir"
        rm -rf "$STATE_DIR/mysql"
        mkdir -p "$STATE_DIR/mysql"
        chown mysql:mysql "$STATE_DIR/mysql"
        local basedir=()
        # Offline: the script finds mariadbd, my_print_defaults and its SQL under --basedir.
        if offline; then basedir=(--basedir="$OFFLINE_ROOT/usr"); fi
        mariadb-install-db --defaults-file="$ETC/my.cnf" --auth-root-authentication-method=socket \
            --skip-test-db "${basedir[@]}" >"$LOG/mariadb-install-db.log" 2>&1 ||
            fail_with_logs "mariadb-install-db failed"
    fi
    # mariadbd runs as user mysql: it needs its own dirs for data, socket and pid file.
    mkdir -p "$MYSQL_RUN"
    touch "$LOG/mariadb.log"
    chown -R mysql:mysql "$STATE_DIR/mysql" "$MYSQL_RUN" "$LOG/mariadb.log"
    log "starting MariaDB on 127.0.0.1:$MYSQL_PORT"
    # mariadbd does not daemonize itself; setsid detaches it from the caller's session.
    setsid -f mariadbd --defaults-file="$ETC/my.cnf" >>"$LOG/mariadb.log" 2>&1 </dev/null
    wait_for "MariaDB" 30 mysql_ok
    # Idempotent: root authenticates through the unix socket as OS root.
    mariadb --socket="$MYSQL_SOCKET" -u root <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO '$DB_USER'@'127.0.0.1';
GRANT ALL ON slurm_acct_db.* TO '$DB_USER'@'localhost';
FLUSH PRIVILEGES;
EOF
}

start_slurmdbd() {
    if pid_alive "$RUN/slurmdbd.pid" && sacctmgr -n show cluster >/dev/null 2>&1; then return 0; fi
    stop_pidfile slurmdbd "$RUN/slurmdbd.pid"
    log "starting slurmdbd"
    slurmdbd || fail_with_logs "slurmdbd failed to start"
    wait_for "slurmdbd" 60 sacctmgr -n show cluster
}

setup_accounts() {
    # sacctmgr add exits non-zero on "Nothing new added", so add only what is missing.
    if [[ -z "$(sacctmgr -n -P show cluster "$CLUSTER" format=cluster)" ]]; then
        sacctmgr -i add cluster "$CLUSTER" >/dev/null
    fi
    if [[ -z "$(sacctmgr -n -P show account "$ACCOUNT" format=account)" ]]; then
        sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" Description="throughput sweeps" \
            Organization=throughput >/dev/null
    fi
    if [[ -z "$(sacctmgr -n -P show assoc where user=root account="$ACCOUNT" cluster="$CLUSTER" format=user)" ]]; then
        sacctmgr -i add user root Account="$ACCOUNT" DefaultAccount="$ACCOUNT" Cluster="$CLUSTER" >/dev/null
    fi
    # An ordinary (non-admin) user: slurmdbd limits such as MaxQueryTimeRange spare root.
    if ! id "$PLAIN_USER" >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /usr/sbin/nologin "$PLAIN_USER"
    fi
    if [[ -z "$(sacctmgr -n -P show assoc where user="$PLAIN_USER" account="$ACCOUNT" cluster="$CLUSTER" format=user)" ]]; then
        sacctmgr -i add user "$PLAIN_USER" Account="$ACCOUNT" DefaultAccount="$ACCOUNT" Cluster="$CLUSTER" >/dev/null
    fi
    # Restriction accounts: a profile naming one gets its QOS's per-user limit; the default
    # account stays unlimited. AccountingStorageEnforce=limits,qos makes them bite.
    local spec name qos limit
    for spec in "$LIMITED_ACCOUNT:submit2:MaxSubmitJobsPerUser=2" "$THROTTLED_ACCOUNT:run2:MaxJobsPerUser=2"; do
        IFS=: read -r name qos limit <<<"$spec"
        if [[ -z "$(sacctmgr -n -P show qos "$qos" format=name)" ]]; then
            sacctmgr -i add qos "$qos" "$limit" >/dev/null
        fi
        if [[ -z "$(sacctmgr -n -P show account "$name" format=account)" ]]; then
            sacctmgr -i add account "$name" Cluster="$CLUSTER" Description="restriction: $limit" \
                Organization=throughput >/dev/null
        fi
        if [[ -z "$(sacctmgr -n -P show assoc where user=root account="$name" cluster="$CLUSTER" format=user)" ]]; then
            sacctmgr -i add user root Account="$name" Cluster="$CLUSTER" QOS="$qos" DefaultQOS="$qos" >/dev/null
        fi
    done
}

start_slurmctld() {
    if pid_alive "$RUN/slurmctld.pid" && scontrol ping >/dev/null 2>&1; then return 0; fi
    stop_pidfile slurmctld "$RUN/slurmctld.pid"
    log "starting slurmctld"
    slurmctld || fail_with_logs "slurmctld failed to start"
    wait_for "slurmctld" 30 sinfo -h
}

start_slurmd() {
    if pid_alive "$RUN/slurmd.pid"; then return 0; fi
    rm -f "$RUN/slurmd.pid"
    log "starting slurmd"
    local stepd=()
    # Offline: slurmd would look for slurmstepd at its compiled-in /usr/sbin/slurmstepd.
    if offline; then stepd=(-d "$OFFLINE_BIN/slurmstepd"); fi
    slurmd -N "$NODE" "${stepd[@]}" || fail_with_logs "slurmd failed to start"
}

node_state() { sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -n1; }

node_ready() {
    case "$(node_state)" in
    idle | mixed | allocated | completing) return 0 ;;
    *) return 1 ;;
    esac
}

wait_for_node() {
    local state="" deadline=$((SECONDS + START_TIMEOUT)) resumed=0
    while ((SECONDS < deadline)); do
        state="$(node_state)"
        case "$state" in
        idle | mixed | allocated | completing) return 0 ;;
        # Left drained/down by an earlier crash: slurmd is up again, so resume it once.
        drain* | down*)
            if ((!resumed)) && pid_alive "$RUN/slurmd.pid"; then
                sleep 2
                scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
                resumed=1
            fi
            ;;
        esac
        sleep 0.2
    done
    fail_with_logs "node $NODE not idle after ${START_TIMEOUT}s (state: '${state:-none}')"
}

# --- subcommands -----------------------------------------------------------------------

cmd_status() {
    # Quiet on success paths' callers; prints what it sees.
    if ! sinfo -h -o '%P %a %D %T' 2>/dev/null; then
        echo "local-slurm: sinfo does not answer (SLURM_CONF=$SLURM_CONF)" >&2
        return 1
    fi
    if ! sacct -n -X -j 1 -o JobID >/dev/null 2>&1; then
        echo "local-slurm: sacct does not work (slurmdbd or MariaDB down?)" >&2
        return 1
    fi
    return 0
}

cmd_start() {
    [[ $EUID -eq 0 ]] || die "must run as root (it installs packages and runs daemons)"
    # Quick no-op when everything already answers.
    if [[ -f "$SLURM_CONF_FILE" ]] && cmd_status >/dev/null 2>&1 && node_ready; then
        log "already running (state dir $STATE_DIR)"
        return 0
    fi
    if offline; then
        # Without the variable, a state dir unpacked earlier runs from what it has.
        if [[ -n "$OFFLINE_DEBS" ]]; then unpack_debs; fi
        [[ -x "$OFFLINE_BIN/slurmctld" ]] || die "$OFFLINE_DIR is incomplete: start with LOCAL_SLURM_OFFLINE_DEBS=DIR"
        use_offline_paths
        ensure_users
        ensure_hostname_resolves
    else
        install_packages
    fi
    if real_gpus; then
        mount_cgroup2_if_absent
        prepare_cgroup_v2
    fi
    write_configs
    local f
    for f in "${GPU_FILES[@]}"; do
        [[ -e "$f" ]] || die "$f (a GPU that nvidia-smi lists) does not exist: gres.conf needs each GPU's device file"
    done
    if ((${#GPU_FILES[@]})); then
        log "real GPUs: ${GPU_FILES[*]}; cgroup: $(gpu_cgroup)"
    fi
    link_etc_slurm_conf
    start_munged
    start_mariadb
    start_slurmdbd
    setup_accounts
    start_slurmctld
    start_slurmd
    wait_for_node
    log "ready: cluster '$CLUSTER', partition '$PARTITION', node $NODE ($(node_state)); state dir $STATE_DIR"
}

cmd_stop() {
    # Reverse order; each step is a no-op when its daemon is not running.
    stop_pidfile slurmd "$RUN/slurmd.pid"
    stop_pidfile slurmctld "$RUN/slurmctld.pid"
    stop_pidfile slurmdbd "$RUN/slurmdbd.pid"
    stop_pidfile mariadbd "$MYSQL_RUN/mysqld.pid"
    stop_pidfile munged "$RUN/munged.pid"
    log "stopped"
}

daemon_pidfile() {
    case "$1" in
    slurmctld | slurmdbd | slurmd) echo "$RUN/$1.pid" ;;
    *) die "unknown daemon '$1' (slurmctld, slurmdbd or slurmd)" ;;
    esac
}

cmd_stop_daemon() {
    [[ -n "${1:-}" ]] || die "usage: $0 stop-daemon {slurmctld|slurmdbd|slurmd}"
    stop_pidfile "$1" "$(daemon_pidfile "$1")"
}

cmd_start_daemon() {
    [[ -n "${1:-}" ]] || die "usage: $0 start-daemon {slurmctld|slurmdbd|slurmd}"
    daemon_pidfile "$1" >/dev/null
    "start_$1"
    if [[ "$1" != slurmdbd ]]; then wait_for_node; fi
}

# cmd_dbd_set: slurmdbd options of a real site (e.g. MaxQueryTimeRange=1-00:00:00) for one
# test, then `dbd-set` with no option restores the permissive file; slurmdbd re-reads it either way.
DBD_MARK="# --- dbd-set (tests): removed by a plain dbd-set ---"
cmd_dbd_set() {
    local conf="$ETC/slurmdbd.conf" kept
    [[ -f "$conf" ]] || die "no $conf: start first"
    kept="$(sed "/^$DBD_MARK\$/,\$d" "$conf")"
    (
        umask 077
        printf '%s\n' "$kept" >"$conf.tmp"
        if (($#)); then
            printf '%s\n' "$DBD_MARK" "$@" >>"$conf.tmp"
        fi
        mv "$conf.tmp" "$conf"
    )
    # SIGHUP through sacctmgr: the slurmdbd that answers re-reads its file, whichever pid it
    # has (a restart could leave an untracked old daemon holding the port).
    sacctmgr -i reconfigure >/dev/null || die "slurmdbd did not take the new options (sacctmgr reconfigure failed)"
}

# cmd_priority_set: allocation budgets (GrpTRESMins, GrpTRESRunMins) act only where the
# multifactor plugin counts usage, every PriorityCalcPeriod: `multifactor` turns it on with
# a one-minute period, `basic` restores the line `start` wrote. It checks what slurmctld runs,
# not only the file (24.11 runs multifactor, every 5 minutes, where the file names no
# PriorityType). A changed PriorityType needs a slurmctld restart; running and queued jobs
# survive it (clients retry for those seconds).
# priority_runs TYPE [PERIOD]: slurmctld runs PriorityType TYPE (and PriorityCalcPeriod PERIOD).
priority_runs() {
    scontrol show config 2>/dev/null | awk -F' *= *' -v t="$1" -v p="${2:-}" '
        $1 == "PriorityType" {type = $2} $1 == "PriorityCalcPeriod" {period = $2}
        END {exit !(type == t && (p == "" || period == p))}'
}
cmd_priority_set() {
    local conf="$SLURM_CONF_FILE" want period edit
    [[ -f "$conf" ]] || die "no $conf: start first"
    case "${1:-}" in
    multifactor) want=priority/multifactor period=00:01:00 ;;
    basic) want=priority/basic period="" ;;
    *) die "usage: $0 priority-set multifactor|basic" ;;
    esac
    if priority_runs "$want" "$period"; then return 0; fi
    # In place of start's line, so that `basic` gives back the very file start wrote (a file
    # written before start named a PriorityType gets one at its end).
    grep -q '^PriorityType=' "$conf" || echo "PriorityType=$want" >>"$conf"
    edit=(-e '/^PriorityCalcPeriod=/d' -e '/^# --- priority-set (tests)/d' -e "s|^PriorityType=.*|PriorityType=$want|")
    if [[ -n "$period" ]]; then edit+=(-e '/^PriorityType=/a PriorityCalcPeriod=1'); fi
    sed "${edit[@]}" "$conf" >"$conf.tmp"
    mv "$conf.tmp" "$conf"
    stop_pidfile slurmctld "$RUN/slurmctld.pid"
    start_slurmctld
    wait_for_node
    priority_runs "$want" "$period" || die "slurmctld does not run PriorityType=$want ${period} after its restart"
    log "PriorityType=$want${period:+, PriorityCalcPeriod=$period}"
}

# cmd_gpu_type_set TYPE|none: the node's GPUs typed (Gres=gpu:TYPE:N, gres.conf Type=TYPE) and
# accounting tracking that type alone (AccountingStorageTRES=gres/gpu:TYPE), as some sites
# configure it: AllocTRES then reads `gres/gpu:TYPE=1` and names no `gres/gpu`. `none` restores
# the untyped lines `start` wrote. Restarts slurmd and slurmctld (for a test with no job running).
cmd_gpu_type_set() {
    local conf="$SLURM_CONF_FILE" gres="$ETC/gres.conf" type="${1:-}"
    [[ -f "$conf" && -f "$gres" ]] || die "no $conf and $gres: start first"
    [[ "$type" =~ ^[a-z0-9]+$ ]] || die "usage: $0 gpu-type-set TYPE|none (TYPE: lower-case letters and digits, e.g. h100)"
    local node=(-E -e 's/(Gres=gpu):[a-z0-9]+:([0-9]+)/\1:\2/' -e 's|^AccountingStorageTRES=.*|AccountingStorageTRES=gres/gpu|')
    local card=(-E -e 's/ Type=[a-z0-9]+//')
    if [[ "$type" != none ]]; then
        node+=(-e "s/(Gres=gpu):([0-9]+)/\\1:$type:\\2/" -e "s|^AccountingStorageTRES=.*|AccountingStorageTRES=gres/gpu:$type|")
        card+=(-e "s/Name=gpu /Name=gpu Type=$type /")
    fi
    sed "${node[@]}" "$conf" >"$conf.tmp" && mv "$conf.tmp" "$conf"
    sed "${card[@]}" "$gres" >"$gres.tmp" && mv "$gres.tmp" "$gres"
    stop_pidfile slurmd "$RUN/slurmd.pid"
    stop_pidfile slurmctld "$RUN/slurmctld.pid"
    start_slurmctld
    start_slurmd
    wait_for_node
    log "GPUs ${type/#none/untyped}: $(grep -o 'Gres=[^ ]*' "$conf"), $(grep '^AccountingStorageTRES=' "$conf")"
}

cmd_env() {
    printf 'export LOCAL_SLURM_DIR=%q\n' "$STATE_DIR"
    printf 'export SLURM_CONF=%q\n' "$SLURM_CONF_FILE"
    if offline; then
        # The unpacked commands and their libraries, ahead of whatever the shell has.
        printf 'export PATH=%q${PATH:+:$PATH}\n' "$OFFLINE_BIN"
        printf 'export LD_LIBRARY_PATH=%q${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\n' "$OFFLINE_LIBS"
    fi
}

# cmd_config: write the configuration into the state dir and print slurm.conf and
# gres.conf; starts nothing and leaves /etc/slurm alone (for checks and tests).
cmd_config() {
    # Running daemons would pick the new files up on their next restart.
    if pid_alive "$RUN/slurmctld.pid" || pid_alive "$RUN/slurmd.pid"; then
        die "Slurm runs from $STATE_DIR; 'config' writes only into a state dir that is not running (set LOCAL_SLURM_DIR)"
    fi
    write_configs
    cat "$ETC/slurm.conf" "$ETC/gres.conf"
    if [[ -f "$ETC/cgroup.conf" ]]; then cat "$ETC/cgroup.conf"; fi
}

# Sourced (by tools/local-slurm-root.sh): the functions above, no subcommand.
if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then return 0; fi

# `start --offline DIR` and `unpack --offline DIR` are LOCAL_SLURM_OFFLINE_DEBS=DIR.
if [[ "${2:-}" == --offline ]]; then
    [[ -n "${3:-}" ]] || die "--offline needs the folder of .deb files (tools/fetch-slurm-debs.sh)"
    OFFLINE_DEBS="$3"
fi
if [[ -n "$OFFLINE_DEBS" ]]; then OFFLINE_DEBS="$(cd "$OFFLINE_DEBS" 2>/dev/null && pwd || echo "$OFFLINE_DEBS")"; fi
# Offline (unpacked earlier): every subcommand finds the unpacked commands first.
if offline && [[ -d "$OFFLINE_BIN" ]]; then use_offline_paths; fi

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
env) cmd_env ;;
config) cmd_config ;;
unpack) cmd_unpack ;;
stop-daemon) cmd_stop_daemon "${2:-}" ;;
dbd-set) shift && cmd_dbd_set "$@" ;;
priority-set) cmd_priority_set "${2:-}" ;;
gpu-type-set) cmd_gpu_type_set "${2:-}" ;;
start-daemon) cmd_start_daemon "${2:-}" ;;
*)
    echo "usage: $0 {start [--offline DIR]|stop|status|env|config|unpack --offline DIR|stop-daemon NAME|start-daemon NAME|dbd-set [OPTION=VALUE...]|priority-set multifactor|basic|gpu-type-set TYPE|none}" >&2
    exit 2
    ;;
esac
