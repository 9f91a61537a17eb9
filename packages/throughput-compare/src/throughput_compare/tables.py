"""comparison.md and comparison.csv from a `Comparison`, and the lines of the PDF's
first page (the same summary table and differences, without the per-point detail)."""

from __future__ import annotations

import csv
import io

from throughput_compare.compare import boundary_text
from throughput_compare.precision import precision_line
from throughput_schema.comparison import Comparison, CurveComparison, Recommendation
from throughput_schema.recommendation import recommendation_text

GIB = 2**30
CSV_FIELDS = (
    "curve", "batch_size", "attempt_a", "attempt_b", "tokens_per_second_a", "tokens_per_second_b",
    "ratio", "ratio_uncertainty", "verdict", "window_spread_a", "window_spread_b", "unstable_a", "unstable_b",
    "reserved_bytes_a", "reserved_bytes_b", "reserved_change_bytes",
    "setup_seconds_a", "setup_seconds_b", "setup_change_seconds",
)  # fmt: skip


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100.0 * value:.2f}%"


def gib(value: int | None, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value / GIB:+.2f} GiB" if signed else f"{value / GIB:.2f} GiB"


def seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1f} s"


def _batch(value: int | None) -> str:
    return "none" if value is None else str(value)


def curve_rows(c: Comparison) -> list[list[str]]:
    """Per curve: verdict counts, boundary and fastest batch in A → B, and each recommendation."""
    rows = [
        ["curve", "points", "faster", "slower", "same", "first OOM A → B", "fastest stable A → B", "recommended A / B"]
    ]
    for curve in c.curves:
        oom_b, fast_b = (
            ("not re-measured",) * 2 if c.spot_check else (_batch(curve.first_oom_b), _batch(curve.fastest_stable_b))
        )
        rows.append([
            curve.curve, str(curve.points), str(curve.faster), str(curve.slower), str(curve.same),
            f"{_batch(curve.first_oom_a)} → {oom_b}" + (" (moved)" if curve.boundary_moved else ""),
            f"{_batch(curve.fastest_stable_a)} → {fast_b}" + (" (changed)" if curve.fastest_changed else ""),
            f"{_recommended(curve.recommendation_a)} / {_recommended(curve.recommendation_b)}",
        ])  # fmt: skip
    return rows


def _recommended(r: Recommendation | None) -> str:
    return "none" if r is None or r.recommended_batch is None else str(r.recommended_batch)


def _md_table(rows: list[list[str]]) -> list[str]:
    head, *body = rows
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in body)]


def difference_lines(c: Comparison) -> list[str]:
    if not c.differences:
        return ["none: same hardware, protocol, recipes, kernels and frozen sources"]
    return [
        f"{d.area} {d.field}: A {d.a} · B {d.b}" + (" (allowed by --allow-protocol-change)" if d.refuses else "")
        for d in c.differences
    ]


def changes(c: Comparison) -> list[str]:
    """The curves whose boundary moved or whose fastest stable batch changed."""
    out = [boundary_text(k) for k in c.curves if k.boundary_moved]
    out += [
        f"{k.curve}: fastest stable batch {_batch(k.fastest_stable_a)} → {_batch(k.fastest_stable_b)}"
        for k in c.curves
        if k.fastest_changed
    ]
    return out or ["no boundary moved and no fastest stable batch changed"]


def noise_lines(c: Comparison) -> list[str]:
    n = c.noise
    return [
        f"noise threshold T = {pct(n.threshold)}: window spread A {pct(n.window_spread_a)}, B {pct(n.window_spread_b)}; "
        f"run-to-run A {pct(n.run_to_run_a)}, B {pct(n.run_to_run_b)} (n/a: no point measured twice)",
        *(f"{name}: {text}" for name, text in n.formulas.items()),
    ]


def _recommendation_line(campaign: str, r: Recommendation | None) -> str:
    return f"{campaign}: " + ("no stable point to recommend" if r is None else recommendation_text(r))


def recommendation_lines(curve: CurveComparison, spot_check: bool = False) -> list[str]:
    # A spot check measures a sample and no boundary, so it has no recommendation of its own.
    b = (
        "B: a spot check of a sample (no boundary re-measured): A's recommendation stands"
        if spot_check
        else _recommendation_line("B", curve.recommendation_b)
    )
    return [_recommendation_line("A", curve.recommendation_a), b]


def markdown(c: Comparison) -> str:
    banner = [f"**{c.test_worker}**", ""] if c.test_worker else []
    lines = [
        *banner,
        *filter(None, [precision_line(c)]),
        *(f"**{t}**" for t in c.accepted),
        c.summary,
        "",
        f"A: `{c.a}`  ",
        f"B: `{c.b}`  ",
        f"kind: {c.kind}; made {c.created_at}",
        "",
    ]
    lines += ["## Curves", "", *_md_table(curve_rows(c)), "", *(f"- {t}" for t in changes(c)), ""]
    lines += ["## Noise and verdicts", "", *(f"- {t}" for t in noise_lines(c)), ""]
    lines += ["## Differences between the campaigns", "", *(f"- {t}" for t in difference_lines(c)), ""]
    lines += ["## Points", ""]
    rows = [["curve", "batch", "A tokens/s", "B tokens/s", "B/A", "±", "verdict", "reserved change", "setup change"]]
    for p in c.points:
        rows.append([
            p.curve, str(p.batch_size), f"{p.tokens_per_second_a:,.0f}", f"{p.tokens_per_second_b:,.0f}",
            f"{p.ratio:.4f}", f"{p.ratio_uncertainty:.4f}", p.verdict + (" (unstable)" if p.unstable_a or p.unstable_b else ""),
            gib(p.reserved_change_bytes, signed=True), seconds(p.setup_change_seconds),
        ])  # fmt: skip
    lines += [*_md_table(rows), ""]
    for label, only in (("A", c.only_in_a), ("B", c.only_in_b)):
        if only:
            lines += [f"Measured only in {label}: {', '.join(only)}", ""]
    lines += [
        "## Batch recommendation",
        "",
        "The smallest stable batch within the noise threshold of the curve's fastest:",
        "",
    ]
    for curve in c.curves:
        line_a, line_b = recommendation_lines(curve, c.spot_check)
        lines += [f"- {curve.curve}: {line_a}", f"  {line_b}"]
    lines += ["", "## Inputs (sha256)", "", *(f"- `{f.sha256}` {f.path}" for f in c.inputs), "", *banner]
    return "\n".join(lines)


def csv_text(c: Comparison) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    # A test worker's banner is a column of every row (as in the report's points.csv), so
    # no row copied elsewhere reads as a measurement.
    writer.writerow([*CSV_FIELDS, "test_worker"] if c.test_worker else CSV_FIELDS)
    for p in c.points:
        row = ["" if getattr(p, f) is None else getattr(p, f) for f in CSV_FIELDS]
        writer.writerow([*row, c.test_worker] if c.test_worker else row)
    return buffer.getvalue()
