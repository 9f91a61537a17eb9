#!/usr/bin/env bash
# slurm-check: the offline local Slurm on the GPU machine, its GPUs as gres, three jobs accounted.
# Proof that the offline local Slurm runs on the lent GPU machine, in one
# device call (kind nvidia-h200-x2, carry .slurm-debs and .whl):
#
#   tools/h200.sh slurm-check            # writes check.log and slurm-check.tar.gz into $OUT
#
# Steps: what the machine offers (OS, cgroups, /dev/nvidia*, nvidia-smi), the offline
# unpack with its ldd check, `tools/local-slurm.sh start` from .slurm-debs, sinfo and
# `scontrol show node` (the GPUs as gres), then three jobs of the local-slurm-gpu shape
# (--gpus=1 --cpus-per-task=8 --mem=64G --time=14) that print nvidia-smi -L,
# CUDA_VISIBLE_DEVICES and torch's view of the GPUs: on two GPUs two run and the third
# waits (squeue), and sacct shows AllocTRES gres/gpu=1 for each. If the start or the jobs
# fail with the cgroup device constraint, the same runs again with LOCAL_SLURM_CGROUP=none
# (GPUs bound through CUDA_VISIBLE_DEVICES alone), keeping the first attempt's evidence.
# Ends with the client commands from a clean shell after `eval "$(tools/local-slurm.sh env)"`,
# then `stop`. Exit status 0 when the jobs ran and were accounted, else 1.
set -uo pipefail

source "$(dirname "$0")/lib.sh"
out="${OUT:-/tmp/h200-slurm-check-out}"
mkdir -p "$out"
work=/tmp/h200-slurm-check
rm -rf "$work"
mkdir -p "$work"
LOG_FILE="$out/check.log"
exec > >(tee -a "$LOG_FILE") 2>&1
export LOCAL_SLURM_OFFLINE_DEBS="$root/.slurm-debs"
export LOCAL_SLURM_START_TIMEOUT="${LOCAL_SLURM_START_TIMEOUT:-45}"
state="${LOCAL_SLURM_DIR:-/var/lib/throughput-local-slurm}"
T0=$SECONDS

section() { printf '\n===== [%3ds] %s =====\n' "$((SECONDS - T0))" "$*"; }
# show CMD...: print the command, then run it (its output is the evidence).
show() { printf '$ %s\n' "$*"; "$@"; local rc=$?; ((rc == 0)) || printf '(exit %d)\n' "$rc"; return $rc; }

pack() {
    section "pack"
    tar -czf "$out/slurm-check.tar.gz" -C / \
        "${state#/}/etc" "${state#/}/log" "${work#/}" 2>/dev/null
    ls -la "$out"
}
trap pack EXIT

section "machine"
show cat /etc/os-release | head -n 4
show uname -r
show nproc
show hostname
show getent hosts "$(hostname -s)"
show nvidia-smi -L
show ls -la /dev/nvidia*
show nvidia-smi -q | grep -E 'Minor Number|Bus Id'
show mount -t cgroup,cgroup2
show cat /sys/fs/cgroup/cgroup.controllers
show grep cgroup /proc/filesystems
show command -v dpkg useradd setsid ldd
du -sh .slurm-debs .whl 2>/dev/null

section "unpack and ldd (tools/local-slurm.sh unpack)"
show tools/local-slurm.sh unpack || exit 1

# job_script N: prints what Slurm gave the job and what CUDA sees, then holds the GPU a
# few seconds so that the jobs overlap and the third one has to wait.
job_script() {
    cat <<'EOF'
#!/bin/bash
echo "job $SLURM_JOB_ID on $(hostname): CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset} SLURM_JOB_GPUS=${SLURM_JOB_GPUS-unset} SLURM_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK-} SLURM_MEM_PER_NODE=${SLURM_MEM_PER_NODE-}"
echo "--- nvidia-smi -L"; nvidia-smi -L; echo "(exit $?)"
echo "--- nvidia-smi --query-gpu=index,pci.bus_id,uuid"; nvidia-smi --query-gpu=index,pci.bus_id,uuid --format=csv,noheader
echo "--- torch"
timeout 60 python3 -c 'import torch; n = torch.cuda.device_count(); print("torch.cuda.device_count()", n); print([torch.cuda.get_device_properties(i).pci_bus_id for i in range(n)]); x = torch.ones(1024, device="cuda"); print("sum on GPU", float(x.sum()))'
rc=$?
echo "(torch exit $rc)"
cat /proc/self/cgroup
sleep 10
exit $rc
EOF
}

# run_jobs LABEL: submit three jobs of the profile's shape, show squeue while they overlap,
# wait for their final sacct rows; true when all three COMPLETED with gres/gpu=1.
run_jobs() {
    local label="$1" ids=() i id
    job_script >"$work/job.sh"
    for i in 1 2 3; do
        id="$(sbatch --parsable --gpus=1 --cpus-per-task=8 --mem=64G --time=14 \
            --account=throughput --partition=gpu --job-name="check-$label-$i" \
            --output="$work/$label-job$i-%j.out" "$work/job.sh")" || { echo "sbatch failed"; return 1; }
        ids+=("${id%%;*}")
    done
    echo "submitted: ${ids[*]}"
    sleep 4
    show squeue -o '%.8i %.20j %.9T %.10r %.12b %N'
    local deadline=$((SECONDS + 90)) rows done_n
    while ((SECONDS < deadline)); do
        # A step daemon that died leaves its job RUNNING for minutes: stop waiting.
        if grep -qs '_exec_wait_child_wait_for_parent' "$work/$label"-job*.out; then
            echo "a step daemon failed (see the job output below and slurmd.log)"
            break
        fi
        rows="$(sacct -X -n -P -j "$(
            IFS=,
            echo "${ids[*]}"
        )" -o JobID,JobName,State 2>/dev/null)"
        done_n="$(awk -F'|' '$2 !~ /^(|allocation)$/ && $3 !~ /^(PENDING|RUNNING|REQUEUED|COMPLETING)$/' <<<"$rows" | wc -l)"
        ((done_n == 3)) && break
        sleep 2
    done
    show sacct -X -j "$(
        IFS=,
        echo "${ids[*]}"
    )" -o JobID,JobName%18,Partition,Account,State,ExitCode,AllocTRES%50,Timelimit,Start,End,NodeList
    for f in "$work/$label"-job*.out; do
        printf '\n--- %s\n' "$(basename "$f")"
        cat "$f"
    done
    local ok
    ok="$(sacct -X -n -P -j "$(
        IFS=,
        echo "${ids[*]}"
    )" -o State,AllocTRES | grep -c '^COMPLETED|.*gres/gpu=1')"
    echo "jobs COMPLETED with gres/gpu=1: $ok of 3"
    ((ok == 3))
}

attempt() {
    local label="$1"
    section "start ($label): tools/local-slurm.sh start"
    show tools/local-slurm.sh start || return 1
    eval "$(tools/local-slurm.sh env)"
    section "sinfo / scontrol show node ($label)"
    show sinfo -N -o '%N %P %T %c %m %G'
    show scontrol show node
    show cat "$state/etc/gres.conf"
    show cat "$state/etc/cgroup.conf"
    section "jobs ($label)"
    run_jobs "$label"
}

result=1
if attempt cgroup-auto; then
    result=0
else
    section "first attempt failed: stop, and again without cgroups (LOCAL_SLURM_CGROUP=none)"
    scancel --partition=gpu 2>/dev/null
    show tools/local-slurm.sh stop
    mkdir -p "$work/attempt1-logs" && cp -a "$state/log/." "$state/etc" "$work/attempt1-logs/" 2>/dev/null
    # slurmd's spool only: slurmctld keeps its job ids, so sacct never sees one id twice.
    rm -rf "$state/spool/d" "$state/log"
    export LOCAL_SLURM_CGROUP=none
    attempt cgroup-none && result=0
fi

section "clients from a clean shell after eval \"\$(tools/local-slurm.sh env)\""
env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin bash -c '
    eval "$(tools/local-slurm.sh env)"
    tools/local-slurm.sh env
    for c in sbatch squeue sacct scontrol scancel sinfo; do printf "%s -> %s\n" "$c" "$(command -v "$c")"; done
    sinfo --version && tools/local-slurm.sh status && echo "status: ok"
'

section "stop"
show tools/local-slurm.sh stop
section "result: $([[ $result == 0 ]] && echo OK || echo FAILED) after $((SECONDS - T0)) s"
exit "$result"
