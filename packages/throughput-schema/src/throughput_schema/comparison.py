"""comparison.json: what the comparison found, as frozen msgspec records with defaults,
so a later reader decodes an older file and skips fields it does not know."""

from __future__ import annotations

import msgspec

from throughput_schema.efficiency import Efficiency
from throughput_schema.noise import SAME

COMPARISON_VERSION = 1


class InputFile(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    sha256: str


class Noise(msgspec.Struct, frozen=True, kw_only=True):
    """The relative spreads the verdicts are read against, and how each was derived."""

    window_spread_a: float = 0.0
    window_spread_b: float = 0.0
    run_to_run_a: float | None = None
    run_to_run_b: float | None = None
    threshold: float = 0.0
    formulas: dict[str, str] = {}


class PointComparison(msgspec.Struct, frozen=True, kw_only=True):
    curve: str
    batch_size: int
    attempt_a: int = 0
    attempt_b: int = 0
    tokens_per_second_a: float = 0.0
    tokens_per_second_b: float = 0.0
    window_spread_a: float = 0.0
    window_spread_b: float = 0.0
    ratio: float = 1.0
    ratio_uncertainty: float = 0.0
    verdict: str = "same"
    unstable_a: bool = False
    unstable_b: bool = False
    reserved_bytes_a: int | None = None
    reserved_bytes_b: int | None = None
    reserved_change_bytes: int | None = None
    setup_seconds_a: float | None = None
    setup_seconds_b: float | None = None
    setup_change_seconds: float | None = None


class Recommendation(msgspec.Struct, frozen=True, kw_only=True):
    """The smallest batch the noise cannot tell apart from a curve's fastest stable one."""

    curve: str
    fastest_batch: int | None = None
    fastest_tokens_per_second: float | None = None
    threshold: float = 0.0
    equally_fast: list[int] = []
    recommended_batch: int | None = None
    recommended_tokens_per_second: float | None = None
    reserved_bytes: int | None = None
    gpu_memory_bytes: int | None = None
    headroom_bytes: int | None = None
    first_oom_batch: int | None = None
    # The most energy-efficient stable batch; None where no stable point measured energy.
    efficiency: Efficiency | None = None


class CurveComparison(msgspec.Struct, frozen=True, kw_only=True):
    curve: str
    points: int = 0
    faster: int = 0
    slower: int = 0
    same: int = 0
    first_oom_a: int | None = None
    first_oom_b: int | None = None
    boundary_moved: bool = False
    fastest_stable_a: int | None = None
    fastest_stable_b: int | None = None
    fastest_changed: bool = False
    recommendation_a: Recommendation | None = None
    recommendation_b: Recommendation | None = None


class Difference(msgspec.Struct, frozen=True, kw_only=True):
    """One way the campaigns differ; `area` is hardware, protocol, recipe, kernels or frozen."""

    area: str
    field: str
    a: str = ""
    b: str = ""
    refuses: bool = False


class Comparison(msgspec.Struct, frozen=True, kw_only=True):
    """B against A: the summary sentence, the noise, every shared point, every curve of
    either manifest, the differences, the points only one measured, and each input's hash."""

    comparison_version: int = COMPARISON_VERSION
    kind: str = "throughput"
    a: str = ""
    b: str = ""
    created_at: str = ""
    summary: str = ""
    allow_protocol_change: bool = False
    noise: Noise = Noise()
    points: list[PointComparison] = []
    curves: list[CurveComparison] = []
    differences: list[Difference] = []
    only_in_a: list[str] = []
    only_in_b: list[str] = []
    inputs: list[InputFile] = []
    # B re-measured a sample of A's points (`run --spot-check-from A`): its boundaries and
    # fastest batches were not measured again, so neither is compared.
    spot_check: bool = False
    # The test-worker banner (throughput_schema.provenance) when either campaign was run by a
    # test worker and --allow-test-worker let it through; "" for measurements.
    test_worker: str = ""
    # What `--allow-difference NAME` accepted, one line each, said at the top (`throughput_compare.allowed`).
    accepted: list[str] = []
    # The points of an FP8 campaign ("A: curve bN", "B: ...") where the layer filter converted no
    # linear: they trained in BF16, so their ratios compare BF16 with BF16 (`throughput_compare.precision`).
    no_fp8_linears: list[str] = []


def differing(c: Comparison) -> list[PointComparison]:
    """The points a spot check fails on: changed beyond the stated threshold and their own
    uncertainty (the verdict rule, `noise.VERDICT_RULE`)."""
    return [p for p in c.points if p.verdict != SAME]
