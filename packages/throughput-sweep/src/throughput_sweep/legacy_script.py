"""The batch script's last line for campaigns frozen before attempts had a request.

A campaign's jobs run from its own frozen copy. A copy frozen before `request.json`
existed has neither `throughput_sweep.node.watchdog` nor a worker that takes `--request`,
so a new attempt on such a campaign (a `--resume`, a `--retry-failed`) execs the watchdog
that copy has, with the command line it understands: the frozen recipe for its failure
records, and each worker's recipe as `--set` flags over the frozen preset. The values
all come from the attempt's request, which is written for these attempts too.
The one such campaign kept is the committed H200 worked example
(`docs/examples/h200-e2e-state/`), which `tools/h200.sh spot-check` resumes; this module goes
when that example is replaced by a campaign frozen by today's code. Only `attempt.py` imports it.
"""

from __future__ import annotations

import json

from throughput_schema import WorkerRequest
from throughput_schema.layout import MANIFEST
from throughput_schema.recipe import override_args
from throughput_sweep.campaign import Campaign
from throughput_sweep.node import watchdog

LEGACY_WATCHDOG = "throughput_sweep.watchdog"
_FROZEN_WATCHDOG = "packages/throughput-sweep/src/" + watchdog.__name__.replace(".", "/") + ".py"


def frozen_before_requests(campaign: Campaign) -> bool:
    """True for a campaign whose frozen copy has no request-reading watchdog.

    A --dry-run of a campaign not yet created has no frozen files: it will be frozen now.
    """
    files = campaign.manifest.frozen_files
    return bool(files) and all(f.path != _FROZEN_WATCHDOG for f in files)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def legacy_watchdog_argv(campaign: Campaign, request: WorkerRequest) -> list[str]:
    p, protocol, time_limit_seconds = request.point, request.protocol, request.time_limit_seconds
    assert time_limit_seconds is not None, "the sweep's requests carry the profile's time limit"

    def worker(output: str, label: str, optimizer_timing: bool) -> str:
        argv = [
            request.python,
            "-m",
            request.worker,
            "benchmark-throughput-worker",
            "--config",
            str(campaign.preset_path(p.model)),
        ]
        for item in override_args(request.recipe):
            argv += ["--set", item]
        argv += [
            "--output",
            output,
            "--warmup",
            str(protocol.warmup),
            "--windows",
            str(protocol.windows),
            "--window-seconds",
            _num(protocol.window_seconds),
        ]
        step = {"argv": argv + ["--optimizer-timing"] * optimizer_timing, "result": output}
        if label:
            step["label"] = label
        return json.dumps(step, ensure_ascii=False, separators=(",", ":"))

    if request.mode == "optimizer-timing":
        workers = [worker(request.baseline, "baseline", False), worker(request.result, "instrumented", True)]
    else:
        workers = [worker(request.result, "", False)]
    argv = [
        request.python,
        "-m",
        LEGACY_WATCHDOG,
        "--recipe",
        str(campaign.recipe_path(p.model)),
        "--mode",
        p.mode,
        "--context-length",
        str(p.context_length),
        "--batch-size",
        str(p.batch_size),
        "--manifest",
        str(campaign.root / MANIFEST),
        "--deadline-minutes",
        _num(request.deadline_seconds / 60),
        "--time-limit-minutes",
        _num(time_limit_seconds / 60),
        "--cpus",
        str(request.cpus),
    ]
    for step in workers:
        argv += ["--worker", step]
    return argv
