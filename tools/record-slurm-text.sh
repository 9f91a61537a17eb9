#!/usr/bin/env bash
# Records what the local Slurm prints where the tool reads Slurm's text: sacct's rows with
# the exact flags and field list the sweep and the audit use (throughput_slurm.sacct), squeue's
# line, scontrol's line of a job cancelled while it pended, and sbatch's refusals. The parser
# tests read the files (packages/throughput-sweep/tests/data/, their README says what each is).
#
#   eval "$(LOCAL_SLURM_VERSION=24.11 tools/local-slurm.sh env)"   # or the 22.05 env
#   tools/record-slurm-text.sh DIR
#
# Writes into DIR (made if missing) one file per recording and `commands.txt`: the Slurm
# version, then each file with the command that printed it (job ids as they were). Submits
# eight small jobs to the restrictions tools/README.md lists (partition `short`, account
# `limited`) and to the default partition, waits for them (a minute and a half: one runs into
# its one-minute time limit) and cancels every job it submitted, whatever happens.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: tools/record-slurm-text.sh DIR" >&2
    exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$1"
out="$(cd "$1" && pwd)"
python="$root/.venv/bin/python"
[[ -x "$python" ]] || { echo "record-slurm-text: $python is missing: run uv sync first" >&2; exit 1; }
command -v sbatch >/dev/null || { echo "record-slurm-text: no sbatch on PATH: eval the env of tools/local-slurm.sh first" >&2; exit 1; }
format="$("$python" -c 'from throughput_slurm.sacct import FORMAT; print(FORMAT)')"
squeue_format="$("$python" -c 'from throughput_sweep.schedulers.slurm.text import SQUEUE_FORMAT; print(SQUEUE_FORMAT)')"
# The environment of every query but sbatch (throughput_slurm.environment.query_environment).
export TZ=UTC SLURM_TIME_FORMAT=standard

work="$(mktemp -d /tmp/record-slurm-text.XXXXXX)"
cd "$work" # the 24.11 wrappers run their command in the current folder
# Every id submitted, one a line: `submit` runs in a subshell ($(...)), so a file, not a variable.
touch "$work/ids"
cleanup() {
    local ids
    ids="$(paste -sd, "$work/ids")"
    [[ -z "$ids" ]] || scancel "$ids" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

{
    echo "$(sbatch --version) ($(scontrol show config | awk '/^ClusterName/ {print "cluster " $3}'))"
    echo "queries under TZ=UTC SLURM_TIME_FORMAT=standard, as the tool asks them"
} >"$out/commands.txt"

# record FILE CMD...: CMD's stdout into FILE, and the command into commands.txt.
record() {
    local file="$1"
    shift
    "$@" >"$out/$file" || true
    echo "$file: $*" >>"$out/commands.txt"
}

# refusal FILE CMD...: CMD's stderr (sbatch's refusal) into FILE.
refusal() {
    local file="$1"
    shift
    if "$@" >"$work/stdout" 2>"$out/$file"; then
        cat "$work/stdout" >>"$work/ids"
        echo "record-slurm-text: '$*' was accepted, not refused" >&2
    fi
    echo "$file: $* (its stderr)" >>"$out/commands.txt"
}

# submit TOKEN SBATCH-OPTIONS... -- COMMAND: the sweep's shape (sbatch_argv), the job's id on stdout.
submit() {
    local token="$1" id
    shift
    id="$(sbatch --parsable --no-requeue "--job-name=$token" "--comment=$token" --account=throughput \
        --gpus=1 --cpus-per-task=8 --mem=64G --time=14 "--output=$work/slurm-%j.out" "--chdir=$work" "$@")"
    echo "$id" >>"$work/ids"
    echo "$id"
}

ended() { # all of the ids have left squeue's running and pending states
    [[ -z "$(squeue --noheader --states=PENDING,RUNNING,COMPLETING --jobs="$(IFS=,; echo "$*")" --format=%i)" ]]
}

wait_for() { # wait_for SECONDS CMD...: until CMD succeeds
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        ((SECONDS < deadline)) || { echo "record-slurm-text: timed out waiting for: $*" >&2; exit 1; }
        sleep 0.5
    done
}

final() { # sacct has caught up: every row has its partition and its end
    local text
    text="$(sacct --parsable2 --noheader -X -j "$1" --format=Partition,End)"
    [[ -n "$text" ]] && ! grep -qE '^\||\|Unknown$|\|$' <<<"$text"
}

started="$(date -u +%Y-%m-%dT%H:%M:%S)"
ok="$(submit tok-ok --wrap 'sleep 1')"
fail="$(submit tok-fail --wrap 'exit 3')"
oom="$(submit tok-oom --mem=100M --wrap "$python -c 'import time; b = bytearray(500 * 2**20); time.sleep(5)'")"
sleeper="$(submit tok-sleep --wrap 'sleep 300')"
timeout="$(submit tok-timeout --time=1 --wrap 'sleep 300')"
sacct_ids="$ok,$fail,$sleeper,$oom"
wait_for 120 ended "$ok" "$fail" "$oom"
record sacct-lagging.txt sacct --parsable2 --noheader -X -j "$sacct_ids" --format="$format"
record squeue.txt squeue --noheader --states=all --jobs="$sacct_ids,$((sleeper + 1000))" --format="$squeue_format"
scancel "$sleeper"
wait_for 60 ended "$sleeper"
wait_for 60 final "$sacct_ids"
record sacct-states.txt sacct --parsable2 --noheader -X -j "$sacct_ids" --format="$format"

# A job over partition `short`'s MaxTime pends for PartitionTimeLimit; cancelled, it never started.
pending="$(submit tok-short --partition=short --wrap 'sleep 1')"
wait_for 30 eval '[[ "$(squeue --noheader --jobs="$pending" --format=%r)" == PartitionTimeLimit ]]'
record squeue-pending.txt squeue --noheader --states=all --jobs="$pending" --format="$squeue_format"
scancel "$pending"
wait_for 30 ended "$pending"
record scontrol-cancelled-pending.txt scontrol show job -o "$pending"

# Refusals: no job is made. `limited`'s QOS admits two queued jobs per user; the third is refused.
for token in tok-limited-1 tok-limited-2; do
    submit "$token" --account=limited --begin=now+1hour --wrap 'sleep 1' >/dev/null
done
refusal sbatch-submit-limit.txt sbatch --parsable --account=limited --begin=now+1hour --wrap 'sleep 1'
refusal sbatch-invalid-qos.txt env SBATCH_QOS=nosuch sbatch --parsable --wrap 'sleep 1'
refusal sbatch-invalid-partition.txt sbatch --parsable --partition=nosuch --wrap 'sleep 1'
refusal sbatch-invalid-account.txt sbatch --parsable --account=nosuch --wrap 'sleep 1'
refusal sbatch-invalid-feature.txt sbatch --parsable --constraint=nosuch --wrap 'sleep 1'
refusal sbatch-too-many-gpus.txt sbatch --parsable --gpus=64 --wrap 'sleep 1'
refusal sbatch-too-much-memory.txt sbatch --parsable --mem=4T --wrap 'sleep 1'
refusal sbatch-test-only-partition.txt sbatch --test-only --partition=nosuch --wrap 'sleep 1'
refusal sbatch-test-only-account.txt sbatch --test-only --account=nosuch --wrap 'sleep 1'

# The lookup by token: sacct without -j, in a window ending at `now` (throughput_slurm.sacct.Window).
wait_for 150 ended "$timeout"
wait_for 60 final "$timeout"
record sacct-by-name.txt sacct --parsable2 --noheader -X "--starttime=$started" --endtime=now \
    --name=tok-ok,tok-fail,tok-oom,tok-timeout --format="$format"
echo "recorded into $out"
