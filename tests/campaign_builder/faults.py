"""Faults in the files of one point (its result, baseline and bursts) for the audit's
planted-fault table (packages/throughput-audit/tests/test_planted_faults.py); faults in
the campaign around the points are in `campaign_faults`. Each edits a finished campaign
(see `planting.Planted`).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import msgspec

from campaign_builder import energy
from campaign_builder.planting import H200, Plant, Planted, replace_fields
from campaign_builder.results import bursts_for, optimizer_timing
from throughput_schema import WorkerResult
from throughput_schema.layout import RESULTS_JSON, encode_bursts
from throughput_schema.recipe import flops_per_token


def summary_rate_edited(p: Planted) -> None:
    p.edit_point(
        "20m-c1024",
        1,
        "result.json",
        lambda d: d["throughput"].update(tokens_per_second=d["throughput"]["tokens_per_second"] * 1.2),
    )


def window_dropped(p: Planted) -> None:
    p.rewrite_result("20m-c1024", 1, lambda r: msgspec.structs.replace(r, windows=r.windows[:-1]))


def window_seconds_edited(p: Planted) -> None:
    p.edit_point(
        "20m-c1024", 2, "result.json", lambda d: d["windows"][3].update(seconds=d["windows"][3]["seconds"] * 1.1)
    )


def window_updates_edited(p: Planted) -> None:
    # One window ran one update more, its counters and figures made to agree.
    def change(r: WorkerResult) -> WorkerResult:
        ws = [
            w if i < 2 else msgspec.structs.replace(w, counter_after=w.counter_after + 1)
            for i, w in enumerate(r.windows)
        ]
        ws[2] = msgspec.structs.replace(ws[2], updates=ws[2].updates + 1)
        return msgspec.structs.replace(r, windows=ws)

    p.rewrite_result("20m-c1024", 1, change)


def counter_edited(p: Planted) -> None:
    p.edit_point(
        "20m-c512",
        1,
        "result.json",
        lambda d: d["windows"][2].update(counter_after=d["windows"][2]["counter_after"] + 1),
    )


def calibration_edited(p: Planted) -> None:
    p.edit_point(
        "20m-c512", 1, "result.json", lambda d: d["calibration"].update(updates=d["calibration"]["updates"] + 1)
    )


def learning_rate_changed(p: Planted) -> None:
    p.edit_point("20m-c1024", 1, "result.json", lambda d: d["recipe"]["optimizer"].update(lr=0.002))


def rope_theta_changed(p: Planted) -> None:
    p.edit_point("20m-c1024", 1, "result.json", lambda d: d["recipe"]["model"].update(rope_theta=500000.0))


def parameter_count_changed(p: Planted) -> None:
    p.edit_point("20m-c1024", 1, "result.json", lambda d: d.update(parameters=d["parameters"] + 1000))


def tokens_per_update_changed(p: Planted) -> None:
    p.edit_point("20m-c512", 4, "result.json", lambda d: d["recipe"]["training"].update(batch_tokens=4096))


def unstable_flag_flipped(p: Planted) -> None:
    p.edit_point("20m-c512", 2, "result.json", lambda d: d["throughput"].update(unstable=False))


def cv_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "result.json", lambda d: d["throughput"].update(cv=d["throughput"]["cv"] * 1.5))


def sequences_per_second_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "result.json", lambda d: d["throughput"].update(sequences_per_second=1.0))


def update_ms_edited(p: Planted) -> None:
    p.edit_point(
        "20m-c512", 1, "result.json", lambda d: d["throughput"].update(update_ms=d["throughput"]["update_ms"] / 2)
    )


def mode_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "result.json", lambda d: d.update(mode="optimizer-timing"))


def result_protocol_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "result.json", lambda d: d["protocol"].update(window_seconds=1.0))


def faster_than_the_gpu(p: Planted) -> None:
    # Every point ran on an H200; one claims 2000x its rate, all its figures consistent:
    # 8.4M tok/s x 151M FLOP/token is about 1,270 TFLOP/s, above the 989 of the datasheet.
    for curve, points in p.built.points.items():
        for batch in points:
            p.rewrite_result(curve, batch, replace_fields(hardware=H200))
    p.rewrite_result(
        "20m-c1024",
        1,
        lambda r: msgspec.structs.replace(
            r, windows=[msgspec.structs.replace(w, seconds=w.seconds / 2000) for w in r.windows]
        ),
    )
    p.edit(RESULTS_JSON, lambda d: d["curves"][1].update(fastest_stable_batch=1))


def _on_gpus(p: Planted, other: dict[tuple[str, int], str]) -> None:
    """Every worker of the optimizer campaign on GPU-0, but the baselines named in `other`."""
    for curve, points in p.built.points.items():
        for batch in points:
            p.rewrite_result(curve, batch, replace_fields(hardware=H200))
            gpu = msgspec.structs.replace(H200, gpu_uuid=other.get((curve, batch), H200.gpu_uuid))
            p.rewrite_result(curve, batch, replace_fields(hardware=gpu), name="baseline.json")


def baseline_on_another_gpu(p: Planted) -> None:
    _on_gpus(p, {("20m-c1024", 2): "GPU-1"})


def baseline_of_another_recipe(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "baseline.json", lambda d: d["recipe"]["model"].update(rope_theta=500000.0))


def optimizer_burst_edited(p: Planted) -> None:
    path = p.folder("20m-c512", 2) / "bursts.jsonl"
    lines = path.read_text().splitlines()
    sample = json.loads(lines[3])
    sample["optimizer_ms"] *= 1.5
    lines[3] = json.dumps(sample)
    path.write_text("\n".join(lines) + "\n")


def optimizer_ms_edited(p: Planted) -> None:
    p.edit_point(
        "20m-c512",
        2,
        "result.json",
        lambda d: d["optimizer_timing"].update(optimizer_ms=d["optimizer_timing"]["optimizer_ms"] * 1.3),
    )


def result_truncated(p: Planted) -> None:
    path = p.folder("20m-c1024", 1) / "result.json"
    path.write_bytes(path.read_bytes()[:200])


def _with_flops(
    flops_delta: int = 0, mfu_factor: float = 1.0, peak: float = 989e12
) -> Callable[[WorkerResult], WorkerResult]:
    """An H200 result carrying its FLOP/token and MFU (the builder's results do not)."""

    def change(r: WorkerResult) -> WorkerResult:
        fpt = flops_per_token(r.recipe.model) + flops_delta
        tp = msgspec.structs.replace(
            r.throughput,
            flops_per_token=float(fpt),
            peak_flops=peak,
            mfu=mfu_factor * fpt * r.throughput.tokens_per_second / peak,
        )
        return msgspec.structs.replace(r, hardware=H200, throughput=tp)

    return change


def flops_per_token_edited(p: Planted) -> None:
    _write_result(p, "20m-c512", 1, _with_flops(flops_delta=1000))


def mfu_edited(p: Planted) -> None:
    _write_result(p, "20m-c512", 1, _with_flops(mfu_factor=1.5))


def mfu_peak_edited(p: Planted) -> None:
    # A lower MFU, consistently computed from a peak twice the datasheet's.
    _write_result(p, "20m-c512", 1, _with_flops(peak=2 * 989e12))


def _write_result(p: Planted, curve: str, batch: int, change: Callable[[WorkerResult], WorkerResult]) -> None:
    """An edit whose derived throughput figures are left as `change` makes them."""
    path = p.folder(curve, batch) / "result.json"
    path.write_bytes(msgspec.json.encode(change(msgspec.json.decode(path.read_bytes(), type=WorkerResult))))


def throughput_removed(p: Planted) -> None:
    p.edit_point("20m-c1024", 1, "result.json", lambda d: d.pop("throughput"))


def optimizer_timing_removed(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "result.json", lambda d: d.pop("optimizer_timing"))


def _timing(change: Callable[[dict], object]) -> Plant:
    return lambda p: p.edit_point("20m-c512", 1, "result.json", lambda d: change(d["optimizer_timing"]))


def optimizer_window_ms_edited(p: Planted) -> None:
    _timing(lambda t: t["window_optimizer_ms"].__setitem__(0, t["window_optimizer_ms"][0] * 1.2))(p)


def optimizer_graph_ms_edited(p: Planted) -> None:
    _timing(lambda t: t["window_graph_ms"].__setitem__(0, t["window_graph_ms"][0] * 1.2))(p)


def optimizer_cv_edited(p: Planted) -> None:
    _timing(lambda t: t.update(optimizer_cv=t["optimizer_cv"] * 2))(p)


def optimizer_unstable_flipped(p: Planted) -> None:
    _timing(lambda t: t.update(unstable=True))(p)


def optimizer_share_of_wall_edited(p: Planted) -> None:
    _timing(lambda t: t.update(share_of_wall=t["share_of_wall"] * 1.1))(p)


def optimizer_share_of_graph_edited(p: Planted) -> None:
    _timing(lambda t: t.update(share_of_graph=t["share_of_graph"] * 1.1))(p)


def optimizer_burst_updates_edited(p: Planted) -> None:
    # One burst claims an update more, in the file and in the result alike.
    path = p.folder("20m-c512", 1) / "bursts.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[0]["updates"] += 1
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    p.edit_point(
        "20m-c512", 1, "result.json", lambda d: d["optimizer_timing"]["bursts"][0].update(updates=lines[0]["updates"])
    )


def windows_removed(p: Planted) -> None:
    p.edit_point("20m-c1024", 1, "result.json", lambda d: d.update(windows=[]))


def optimizer_slower_than_the_update(p: Planted) -> None:
    # The optimizer alone takes 200 ms of the instrumented worker's 250 ms update, while
    # the baseline's whole update is said to take 125 ms: every figure and the raw bursts
    # agree with each other, but the optimizer's share of the baseline's update is 160%.
    folder = p.folder("20m-c512", 1)
    res = msgspec.json.decode((folder / "result.json").read_bytes(), type=WorkerResult)
    bursts = bursts_for(res, optimizer_ms=200.0, graph_ms=240.0)
    timing = optimizer_timing(res, bursts, 1, 512, res.protocol)
    (folder / "result.json").write_bytes(msgspec.json.encode(msgspec.structs.replace(res, optimizer_timing=timing)))
    (folder / "bursts.jsonl").write_bytes(encode_bursts(bursts))
    p.rewrite_result(
        "20m-c512",
        1,
        lambda r: msgspec.structs.replace(
            r, windows=[msgspec.structs.replace(w, seconds=w.seconds / 2) for w in r.windows]
        ),
        name="baseline.json",
    )


# -------------------------------------------------------------------- energy (campaign "energy")


def window_energy_doubled(p: Planted) -> None:
    # A window's derived joules doubled; its raw counter readings left as they were.
    p.edit_point(
        "20m-c1024",
        2,
        "result.json",
        lambda d: d["windows"][1]["energy"].update(joules=2 * d["windows"][1]["energy"]["joules"]),
    )


def _forge_readings(p: Planted, change: Callable[[list[tuple[int, int, float]]], list[tuple[int, int, float]]]) -> None:
    p.rewrite_result("20m-c1024", 1, lambda r: energy.rederived(r, change(energy.readings(r))))


def power_above_the_limit(p: Planted) -> None:
    # Window 2 drew 1.3 x the power limit; the counter's later readings and every figure made to agree.
    def change(rs):
        start, end, interval = rs[2]
        shift = start + round(1000 * 1.3 * energy.POWER_LIMIT * interval) - end
        return [
            (s, e + shift, i) if k == 2 else (s + shift, e + shift, i) if k > 2 else (s, e, i)
            for k, (s, e, i) in enumerate(rs)
        ]

    _forge_readings(p, change)


def counter_backwards_between_windows(p: Planted) -> None:
    # From window 3 on the counter reads 1.5 kJ lower: each window's energy unchanged, figures agree.
    back = 10 * energy.BETWEEN_MJ
    _forge_readings(p, lambda rs: [(s - back, e - back, i) if k >= 3 else (s, e, i) for k, (s, e, i) in enumerate(rs)])


def counter_backwards_within_a_window(p: Planted) -> None:
    # Window 1's readings swapped: the counter ran backwards over it; figures made to agree.
    _forge_readings(p, lambda rs: [(e, s, i) if k == 1 else (s, e, i) for k, (s, e, i) in enumerate(rs)])


def setup_energy_zero(p: Planted) -> None:
    p.edit_point("20m-c512", 4, "result.json", lambda d: d["energy"].update(setup_joules=0.0))


def joules_per_token_edited(p: Planted) -> None:
    p.edit_point(
        "20m-c512",
        1,
        "result.json",
        lambda d: d["energy"].update(joules_per_token=0.9 * d["energy"]["joules_per_token"]),
    )


def mean_power_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 1, "result.json", lambda d: d["energy"].update(mean_watts=0.9 * d["energy"]["mean_watts"]))


def energy_interval_edited(p: Planted) -> None:
    p.edit_point("20m-c512", 2, "result.json", lambda d: d["energy"].update(interval="span"))


def window_readings_removed(p: Planted) -> None:
    p.edit_point("20m-c512", 2, "result.json", lambda d: d["windows"][0].update(energy=None))


def job_energy_below_its_windows(p: Planted) -> None:
    # sacct says the job used 1 kJ; its windows counted some 30 kJ.
    p.sacct_row("20m-c1024", 2, consumed_energy_raw="1000")


def window_without_energy(p: Planted) -> None:
    # The counter read the same at window 4's start and end: no power drawn; figures agree.
    _forge_readings(p, lambda rs: [(s, s, i) if k == 4 else (s, e, i) for k, (s, e, i) in enumerate(rs)])


def precision_edited(p: Planted) -> None:
    """A BF16 campaign's point claims to have trained its linears in FP8."""
    p.edit_point("20m-c512", 1, "result.json", lambda d: d["recipe"]["training"].update(precision="fp8-tensorwise"))


def fp8_linears_on_a_bf16_point(p: Planted) -> None:
    """A BF16 point recording FP8 linears: what it says ran is not what its precision runs."""
    p.edit_point(
        "20m-c512",
        1,
        "result.json",
        lambda d: d.update(fp8={"recipe": "tensorwise", "converted": ["blocks.0.mlp.gate_up"]}),
    )


def muon_split_on_an_adamw_point(p: Planted) -> None:
    """An AdamW point recording a Muon split: what it says each optimizer updated is not what AdamW does."""
    p.edit_point(
        "20m-c512",
        1,
        "result.json",
        lambda d: d.update(optimizer_owned={"muon": ["blocks.0.attn.proj.weight[0:256]"], "adamw": ["embed.weight"]}),
    )


def optimizer_edited(p: Planted) -> None:
    """An AdamW campaign's point claims to have trained with Muon."""
    p.edit_point("20m-c512", 1, "result.json", lambda d: d["recipe"]["optimizer"].update(name="muon"))


def setup_phase_edited(p: Planted) -> None:
    """A setup phase shortened: the setup's split no longer accounts for its seconds."""
    p.edit_point("20m-c512", 1, "result.json", lambda d: d["setup_phases"].update(compile=1.0))


def setup_longer_than_its_job(p: Planted) -> None:
    """A setup (its split kept adding up) longer than the scheduler says its job ran."""

    def longer(d: dict) -> None:
        d["setup_seconds"] += 200.0
        d["setup_phases"]["compile"] += 200.0

    p.edit_point("20m-c512", 1, "result.json", longer)
