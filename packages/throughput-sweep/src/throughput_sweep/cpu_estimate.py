"""How long a campaign's points take on this machine's CPU, said before the first one starts.

A model meant for a GPU trains on a CPU at a few updates a minute: without a word, the first
point of `--models smollm2-135m` sat for twelve minutes as "1 running" until its watchdog
ended it. For a campaign whose jobs run here (a backend without `remote_nodes`) with the real
worker, the compute Python times the real update of the `tiny` preset at batch 1 of the
smallest context (`python -m tiny_llm cpu-rate`, which says "cuda" instead where a GPU is
visible; a few seconds, where a large model's own update could take minutes): its FLOPs
over that time are the CPU's rate. Each model's seconds per update are
its FLOPs at that rate, and its first point's seconds the protocol's at that pace (the setup's
updates, warm-up, calibration, every window at its minimum of updates; extra windows
not counted). The rate of one model at one shape stands for the others, so the figures are
estimates (`docs/guide.md` gives one against the update it estimated). A point estimated
beyond the watchdog is refused unless `--allow-slow-cpu`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from throughput_schema import ClusterProfile, Protocol, Recipe, write_atomic
from throughput_schema.precision import is_fp8
from throughput_schema.provenance import PRODUCTION_WORKER
from throughput_schema.recipe import flops_per_token, load_recipe, with_point
from throughput_sweep.attempt import point_recipe
from throughput_sweep.campaign import Campaign, CampaignError
from throughput_sweep.node.watchdog import thread_count
from throughput_sweep.schedulers import backend

PROBE_TIMEOUT = 120.0
REFERENCE = "tiny"


@dataclass(frozen=True)
class Estimate:
    model: str
    context: int
    update_seconds: float
    point_seconds: float


def point_seconds(update: float, protocol: Protocol, setup_updates: int) -> float:
    """`setup_updates`: those the worker's build runs before the protocol (the probe says)."""
    before = (setup_updates + protocol.warmup + protocol.calibration_updates) * update
    window = max(protocol.window_seconds, protocol.min_updates_per_window * update)
    return before + protocol.windows * window


def probe(profile: ClusterProfile, recipe: Recipe) -> dict:
    """The compute Python's word on `recipe`'s update: {"device": "cuda"}, or its time on the
    CPU (cpu_rate.py's JSON), or {"error": why}."""
    with tempfile.TemporaryDirectory(prefix="throughput-cpu-rate-") as tmp:
        config = Path(tmp) / "recipe.json"
        write_atomic(config, recipe)
        argv = [profile.python, "-m", "tiny_llm", "cpu-rate", "--config", str(config)]
        argv += ["--threads", str(thread_count(profile.cpus_per_task))]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (ValueError, IndexError):
        answer = None
    if not isinstance(answer, dict) or answer.get("device") not in ("cuda", "cpu"):
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
    return answer


def reference(campaign: Campaign) -> tuple[str, Recipe]:
    """The update timed: the tiny preset (seconds on any CPU) at batch 1 of the smallest
    context, or the campaign's smallest model where the preset is not found."""
    m = campaign.manifest
    context = min(m.contexts)
    preset = Path(m.source_root) / "configs" / f"{REFERENCE}.yaml"
    if preset.exists():
        return REFERENCE, with_point(load_recipe(preset), context_length=context, batch_size=1, protocol=m.protocol)
    recipes = {model: point_recipe(campaign, model, context, 1) for model in m.models}
    smallest = min(recipes, key=lambda model: flops_per_token(recipes[model].model))
    return smallest, recipes[smallest]


def estimates(campaign: Campaign, rate: float, setup_updates: int) -> list[Estimate]:
    m = campaign.manifest
    context = min(m.contexts)
    out = []
    for model in m.models:
        recipe = point_recipe(campaign, model, context, 1)
        update = flops_per_token(recipe.model) * context / rate
        out.append(Estimate(model, context, update, point_seconds(update, m.protocol, setup_updates)))
    return out


def check(campaign: Campaign, *, allow_slow: bool) -> tuple[list[str], str]:
    """The lines to say before a campaign on this machine's CPU starts (none elsewhere), and
    the refusal where a point would outlast its watchdog and `allow_slow` is off, or where these
    jobs cannot run the campaign's precision (`precision_refusal`) ('' if none)."""
    m = campaign.manifest
    if backend(m.profile.scheduler).remote_nodes or m.worker != PRODUCTION_WORKER:
        return [], ""
    timed, recipe = reference(campaign)
    context = recipe.model.context_length
    answer = probe(m.profile, recipe)
    if "error" in answer:
        return [f"note: could not time an update with {m.profile.python} ({answer['error']}); no CPU time estimate"], ""
    if answer["device"] != "cpu" or is_fp8(m.protocol.precision):
        return [], precision_refusal(m.protocol.precision, answer)
    rate = float(answer["flops_per_second"])
    lines = [
        f"no GPU here: the points train on the CPU ({answer['threads']} threads, {answer['backend']}); "
        f"{timed} at context {context}, batch 1 ran {answer['seconds_per_update']:.2g} s an update, "
        f"{rate / 1e9:.1f} GFLOP/s. Estimated for one job alone:"
    ]
    limit = m.profile.watchdog_minutes * 60
    slow = []
    for e in estimates(campaign, rate, int(answer["setup_updates"])):
        lines.append(
            f"  {e.model} at context {e.context}, batch 1: {e.update_seconds:.2g} s per update, "
            f"{e.point_seconds:.0f} s for the point (the watchdog stops a job at {limit:.0f} s)"
        )
        if e.point_seconds > limit:
            slow.append(e)
    if not slow or allow_slow:
        return lines, ""
    names = ", ".join(f"{e.model} ({e.point_seconds:.0f} s)" for e in slow)
    return lines, (
        f"on this machine's CPU the first point of {names} would outlast the watchdog's {limit:.0f} s; "
        "run it on a GPU, choose a smaller model (tiny, 20m), or add --allow-slow-cpu"
    )


def precision_refusal(precision: str, answer: dict) -> str:
    """Why this machine's jobs cannot run `precision` ('' if they can): FP8 on its CPU, or on a
    GPU where the compute Python has no torchao or the GPU no FP8 matrix units."""
    if answer["device"] == "cpu" and is_fp8(precision):
        return (
            f"--precision {precision} trains only on a CUDA GPU with FP8 matrix units, and this "
            "campaign's jobs run on this machine's CPU; use --precision bf16 here, or a GPU profile"
        )
    refused = answer.get("precision_refused")
    return f"the compute environment cannot run --precision {precision}: {refused}" if refused else ""


def announce(campaign: Campaign, *, allow_slow: bool, dry_run: bool = False) -> None:
    """Say `check`'s lines on stderr; raise its refusal as the one-line CampaignError (a dry
    run, which plans without running, says it as a note)."""
    lines, refusal = check(campaign, allow_slow=allow_slow)
    if refusal and dry_run:
        lines.append(f"note: the run will refuse: {refusal}")
    for line in lines:
        print(f"[sweep] {line}", file=sys.stderr)
    if refusal and not dry_run:
        raise CampaignError(refusal)
