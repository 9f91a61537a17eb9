#!/usr/bin/env bash
# A real single-node Slurm (22.05 from Debian 12) for tests, demos and CI.
#
#   tools/local-slurm.sh start    install what is missing, start everything, wait for the node
#   tools/local-slurm.sh stop     stop slurmd, slurmctld, slurmdbd, MariaDB, munged
#   tools/local-slurm.sh status   exit 0 only if sinfo answers and sacct works
#   tools/local-slurm.sh env      shell lines to eval: eval "$(tools/local-slurm.sh env)"
#   tools/local-slurm.sh stop-daemon NAME    stop one daemon (slurmctld, slurmdbd or slurmd)
#   tools/local-slurm.sh start-daemon NAME   start it again, as `start` does (fault tests)
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
# 96 CPUs, 768 GiB, 16 fake GPUs, so exactly 12 jobs of --gpus=1 --cpus-per-task=8
# --mem=64G run at once (the campaign controller's max_concurrent_jobs) and a 13th waits.
# The limits are nominal; the jobs themselves are small.
set -euo pipefail

STATE_DIR="${LOCAL_SLURM_DIR:-/var/lib/throughput-local-slurm}"
ETC="$STATE_DIR/etc"
LOG="$STATE_DIR/log"
RUN="$STATE_DIR/run"
SLURM_CONF_FILE="$ETC/slurm.conf"
MUNGE_SOCKET="$RUN/munge.socket"
MYSQL_RUN="$STATE_DIR/mysql-run" # owned by mysql: socket and pid file
MYSQL_SOCKET="$MYSQL_RUN/mysqld.sock"
MYSQL_PORT=3307
DB_USER=slurm
DB_PASS=slurm-local-only # MariaDB listens on 127.0.0.1 only
CLUSTER=local
ACCOUNT=throughput
PARTITION=gpu
NODE="$(hostname -s)"
START_TIMEOUT="${LOCAL_SLURM_START_TIMEOUT:-60}"

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

# stop_pidfile NAME PIDFILE: SIGTERM, wait up to 20 s, then SIGKILL; remove the pid file.
stop_pidfile() {
    local name="$1" pidfile="$2" pid i
    if ! pid_alive "$pidfile"; then
        rm -f "$pidfile"
        return 0
    fi
    pid="$(tr -dc '0-9' <"$pidfile")"
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

    cat >"$ETC/slurm.conf" <<EOF
# Written by tools/local-slurm.sh; edits are overwritten on the next start.
ClusterName=$CLUSTER
SlurmctldHost=$NODE
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

# Containment (cgroup v1 on the test machines); limits are nominal on this box.
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/cgroup
JobAcctGatherFrequency=30

# Scheduling: start jobs within a second of sbatch.
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=1,sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
KillWait=5
OverTimeLimit=0
MinJobAge=300

# Accounting through slurmdbd (Slurm 22.05 has no file-based storage that sacct reads).
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$NODE
# For slurmdbd connections Slurm takes the munge socket from here, not from AuthInfo.
AccountingStoragePass=$MUNGE_SOCKET
AccountingStorageTRES=gres/gpu
AccountingStoreFlags=job_comment
AccountingStorageEnforce=associations

GresTypes=gpu
# Declared far beyond the hardware: 12 concurrent --gpus=1 --cpus-per-task=8 --mem=64G jobs.
SlurmdParameters=config_overrides
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=96 RealMemory=786432 Gres=gpu:16 State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=UNLIMITED State=UP
EOF

    cat >"$ETC/gres.conf" <<EOF
NodeName=$NODE Name=gpu File=$STATE_DIR/dev/nvidia[0-15]
EOF

    cat >"$ETC/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
ConstrainCores=no
ConstrainDevices=no
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
EOF

    # slurmdbd refuses a slurmdbd.conf readable by others (it holds the DB password).
    (
        umask 077
        cat >"$ETC/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=$NODE
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
        mariadb-install-db --defaults-file="$ETC/my.cnf" --auth-root-authentication-method=socket \
            --skip-test-db >"$LOG/mariadb-install-db.log" 2>&1 ||
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
    slurmd -N "$NODE" || fail_with_logs "slurmd failed to start"
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
    install_packages
    command -v mariadbd >/dev/null || die "mariadbd not found after install"
    id mysql >/dev/null 2>&1 || die "user mysql missing (mariadb-server not installed?)"
    write_configs
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

cmd_env() {
    printf 'export LOCAL_SLURM_DIR=%q\n' "$STATE_DIR"
    printf 'export SLURM_CONF=%q\n' "$SLURM_CONF_FILE"
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
env) cmd_env ;;
stop-daemon) cmd_stop_daemon "${2:-}" ;;
start-daemon) cmd_start_daemon "${2:-}" ;;
*)
    echo "usage: $0 {start|stop|status|env|stop-daemon NAME|start-daemon NAME}" >&2
    exit 2
    ;;
esac
