"""The six-page PDF: pages drawn as matplotlib figures, then checked and stamped with pypdf.

1  summary and the key table
2  throughput vs batch; memory vs batch with the GPU's capacity
3  optimizer share vs batch; optimizer table at each curve's primary batch
4  projected training time with window ranges; how to read the estimates
5  context comparison at fixed tokens per update; its table
6  methods, the checks that passed, and the SHA-256 of the inputs
"""

from __future__ import annotations

import io
import statistics
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure
from pypdf import PdfReader, PdfWriter

from throughput_report import figures, tables
from throughput_report.projections import SPEEDUPS, Projection, median_share
from throughput_schema.recommendation import THRESHOLD_SENTENCE
from throughput_schema.records import Protocol

PAGE = (11.69, 8.27)  # A4 landscape
PAGES = 6
# Text that each page must carry; the PDF is refused if extraction does not find it.
PAGE_MARKERS = (
    "Training-time estimates",
    "Throughput vs batch",
    "Optimizer share vs batch",
    "Projected training time",
    "Context comparison",
    "Methods and inputs",
)

EXCLUSIONS = (
    "The estimates are ideal steady-state times. They exclude startup (imports, compilation, graph capture), "
    "data delivery (the benchmark's inputs are fixed on the GPU), evaluation and checkpointing, and they do not "
    "predict convergence or equal model quality: the repeated synthetic batch measures execution speed only."
)


@dataclass(frozen=True)
class Context:
    """What the text pages say about the inputs."""

    pairs: list[tuple[str, str]]  # (throughput, optimizer) campaign paths
    gpu: str
    campaign_digests: list[tuple[str, str, int, str]]  # (campaign, manifest sha, files, digest of its lines)
    inputs_digest: str
    input_files: int
    checks: dict[str, int]
    protocols: list[tuple[str, Protocol]]  # (campaign, its manifest's protocol)
    banner: str = ""  # a test worker's, on every page
    notes: tuple[str, ...] = ()  # page 1: the protocol against the guide's, mixed hardware
    setup_shares: list[tuple[str, str]] = field(default_factory=list)  # (campaign, its `SetupShare.line()`)


def protocol_text(protocols: list[tuple[str, Protocol]]) -> str:
    """The measurement protocol as the manifests record it, once when every campaign shares it.

    Windows may be shortened on the command line to fit the GPU time at hand, so the
    report states the length that was used rather than the default.
    """

    def describe(p: Protocol) -> str:
        return (
            f"{p.warmup} warm-up and {p.calibration_updates} calibration updates, then {p.windows} synchronised "
            f"windows of {p.window_seconds:g} s (at least {p.min_updates_per_window} updates each; "
            f"{p.extra_windows} more when the CV exceeds {p.cv_threshold:.0%}); optimizer bursts of "
            f"{p.burst_seconds:g} s"
        )

    distinct = {p for _, p in protocols}
    if len(distinct) == 1:
        return f"Protocol of every campaign: {describe(protocols[0][1])}."
    return "Protocols differ between campaigns: " + "; ".join(f"{name}: {describe(p)}" for name, p in protocols) + "."


def _header(fig: Figure, number: int, title: str) -> None:
    fig.text(0.04, 0.955, title, fontsize=15, fontweight="bold", va="top")
    fig.text(0.96, 0.955, f"page {number} of {PAGES}", fontsize=8, ha="right", va="top", color="0.4")


def _page(number: int, title: str, ratios: list[float]):
    """A page with its title band on top and one subfigure per ratio below it."""
    fig = Figure(figsize=PAGE)
    band, *parts = fig.subfigures(
        len(ratios) + 1, 1, squeeze=False, height_ratios=[0.09 * sum(ratios), *ratios], hspace=0.0
    )[:, 0]
    band.text(0.04, 0.6, title, fontsize=15, fontweight="bold", va="center")
    band.text(0.96, 0.6, f"page {number} of {PAGES}", fontsize=8, ha="right", va="center", color="0.4")
    return fig, parts


def _paragraphs(container, x: float, y: float, items: list[str], *, size: float = 8.8, right: float = 0.96) -> float:
    """Wrapped paragraphs from (x, y) down, in the container's coordinates; returns the y below them."""
    width_in = container.bbox.width / container.dpi * (right - x)
    height_in = container.bbox.height / container.dpi
    chars = int(width_in * 72 / (size * 0.56))
    line = size * 1.32 / 72 / height_in
    for item in items:
        for text in textwrap.wrap(item, width=chars) or [""]:
            container.text(x, y, text, fontsize=size, va="top")
            y -= line
        y -= line * 0.35
    return y


def _table(
    fig: Figure, rect, header: list[str], rows: list[list[str]], *, size: float = 7.6, widths: list[float] | None = None
) -> None:
    ax = fig.add_axes(rect)
    ax.axis("off")
    if not rows:
        ax.text(0, 1, "no rows", va="top")
        return
    table = ax.table(cellText=rows, colLabels=header, loc="upper center", cellLoc="center", colWidths=widths)
    table.auto_set_font_size(False)
    table.set_fontsize(size)
    two_line = any("\n" in h for h in header)
    height = min(0.075, 1.0 / (len(rows) + (2.6 if two_line else 1.5)))
    for (r, _), cell in table.get_celld().items():
        cell.set_height(height * (1.7 if r == 0 and two_line else 1.0))
        cell.set_linewidth(0.4)
        if r == 0:
            cell.set_facecolor("#e8e8e8")
            cell.set_text_props(fontweight="bold")
        elif r % 2 == 0:
            cell.set_facecolor("#f6f6f6")


def optimizer_text(protocols: list[tuple[str, Protocol]]) -> list[str]:
    """A paragraph naming the optimizer where a campaign trained with another than the guide's
    AdamW: the measurement and optimizer-timing text then stand for that optimizer's update and step."""
    from throughput_schema.muon import GUIDE_OPTIMIZER, settings_text

    other = {(p.optimizer, settings_text(p)) for _, p in protocols if p.optimizer != GUIDE_OPTIMIZER}
    return [
        f"Optimizer: {name} ({settings}), not the guide's AdamW; where this page says AdamW update and "
        "ArenaAdamW.step, read that optimizer's update and step (ArenaMuon.step, AdamW's part included)."
        for name, settings in sorted(other)
    ]


def _windows(protocols: list[tuple[str, Protocol]]) -> str:
    lengths = sorted({p.window_seconds for _, p in protocols})
    return f"Measurement windows of {' and '.join(f'{s:g} s' for s in lengths)} (protocol on page 6)."


def page_summary(proj: Projection, ctx: Context) -> Figure:
    fig = Figure(figsize=PAGE)
    _header(fig, 1, "Training-time estimates at 20 tokens per parameter")
    shares = [c.best.optimizer_share for c in proj.curves if c.best]
    unstable = [c.curve for c in proj.curves if c.best and not c.best_is_stable]
    pairs = "; ".join(f"{t} with {o}" for t, o in ctx.pairs)
    items = [
        f"Campaign pairs (throughput with optimizer timing, by argument order): {pairs}.",
        f"{len(proj.models)} models × {len(proj.contexts)} contexts ({', '.join(f'{c:,}' for c in proj.contexts)}): "
        f"{len(proj.curves)} curves, {len(proj.points)} fitting points on {ctx.gpu}. All independent checks passed "
        f"({sum(ctx.checks.values()):,} in all; see page 6). {_windows(ctx.protocols)}",
        "Primary rate R: the optimizer campaign's uninstrumented baseline worker, at each curve's fastest stable "
        "batch; the original sweep's rate is shown as independent comparison data. Budget 20·P tokens per model, "
        "the same for every setup of that model. T = 20·P / R; complete final updates U = ceil(20·P / (B·L)) take "
        "U·B·L / R.",
        f"Optimizer share at the primary batch: median {tables.fmt_pct(statistics.median(shares) if shares else median_share(proj.points))}, "
        f"range {tables.fmt_pct(min(shares, default=0))} – {tables.fmt_pct(max(shares, default=0))}. "
        "Window range: slowest to fastest measurement window within the run (not a confidence interval).",
        EXCLUSIONS,
    ]
    items[1:1] = list(ctx.notes)
    if proj.energy:
        items.insert(len(items) - 1, energy_text(proj))
    if unstable:
        items.append("* no stable point on " + ", ".join(unstable) + "; the fastest unstable point is shown.")
    closed = [f"{c.curve} closed by hand {c.closed}" for c in proj.curves if c.closed]
    if closed:
        items.append("Curves ended by a recorded decision, not by a memory boundary: " + "; ".join(closed) + ".")
    y = _paragraphs(fig, 0.04, 0.9, items, size=8.6)
    header, rows = tables.key_table(proj)
    widths = [0.055, 0.065, 0.06, 0.055, 0.065, 0.075, 0.075, 0.12, 0.075, 0.085, 0.075, 0.08, 0.075]
    size, left, width = 7.4, 0.03, 0.94
    if len(header) > len(widths):  # the projected run's energy: the same page, narrower columns
        widths += [0.085, 0.13, 0.06][: len(header) - len(widths)]
        widths = [w / sum(widths) for w in widths]
        size, left, width = 6.4, 0.02, 0.96
    _table(fig, [left, 0.03, width, y - 0.05], header, rows, size=size, widths=widths)
    return fig


def energy_text(proj: Projection) -> str:
    """Page 1: what the energy columns are, and the emissions' grid figure where one was given."""
    text = (
        "Energy E = 20·P · J/token / 3.6e6 kWh at the primary batch: J/token is the baseline worker's median "
        "window, as the GPU's own energy counter measured it (the board only: not the node, not cooling); "
        "its window range runs from the window of least to the one of most joules per token."
    )
    if proj.carbon_intensity is not None:
        text += (
            f" Emissions E·G for the grid figure given, G = {proj.carbon_intensity:g} gCO2e/kWh "
            "(the user's, not measured)."
        )
    missing = [c.curve for c in proj.curves if c.best is not None and c.best.joules_per_token is None]
    if missing:
        text += " No energy was measured on " + ", ".join(missing) + "."
    return text


def page_throughput_memory(proj: Projection) -> Figure:
    fig, (upper, lower) = _page(2, "Throughput vs batch and memory vs batch", [1, 1])
    figures.draw_throughput(upper, proj)
    figures.draw_memory(lower, proj)
    return fig


def page_optimizer(proj: Projection) -> Figure:
    fig, (upper, lower) = _page(3, "Optimizer share vs batch", [1.15, 1])
    figures.draw_optimizer_share(upper, proj)
    header, rows = tables.optimizer_table(proj)
    y = _paragraphs(
        lower,
        0.04,
        0.98,
        [
            "At each curve's primary batch. Primary share = median window optimizer ms (instrumented worker, bursts "
            "weighted by update count) / baseline full-update ms. Instr. wall change compares the instrumented and "
            "baseline rates; it includes instrumentation overhead and drift between workers (flagged beyond 5%)."
        ],
        size=8,
    )
    _table(lower, [0.03, 0.0, 0.94, y - 0.02], header, rows, size=7.2)
    return fig


def page_training_time(proj: Projection) -> Figure:
    fig, (upper, lower) = _page(4, "Projected training time per model and context", [1.55, 1])
    figures.draw_training_time(upper, proj)
    left, right = lower.subfigures(1, 2, width_ratios=[1, 1.25], wspace=0.0)
    _paragraphs(
        left,
        0.07,
        0.97,
        [
            "Bars: T = 20·P / R at each curve's fastest stable batch, R from the baseline worker; each model's budget "
            "(20·P tokens) is fixed across contexts and batches. Error bars: T at the fastest and slowest measurement "
            "window of the same run (within-run variation, not a confidence interval across independent runs).",
            "Right: rounding to complete final updates, U = ceil(20·P / (B·L)); the last update overshoots the budget "
            "by U·B·L − 20·P tokens.",
            EXCLUSIONS,
        ],
        size=7.6,
        right=0.98,
    )
    header = ["Curve", "B", "U", "U·B·L tokens", "over budget", "U·B·L / R"]
    rows = [
        [
            c.curve,
            str(c.best.batch),
            f"{c.best.complete_updates:,}",
            f"{c.best.complete_tokens:,}",
            f"+{c.best.complete_tokens - c.best.budget_tokens:,}",
            tables.fmt_hours(c.best.complete_seconds),
        ]
        for c in proj.curves
        if c.best is not None
    ]
    _table(right, [0.02, 0.02, 0.96, 0.96], header, rows, size=6.6)
    return fig


def page_context(proj: Projection) -> Figure:
    fig, (upper, lower) = _page(5, f"Context comparison at {proj.tokens_per_update:,} tokens per update", [1.25, 1])
    figures.draw_context_comparison(upper, proj)
    header, rows = tables.comparison_table(proj)
    y = _paragraphs(
        lower,
        0.04,
        0.98,
        [
            f"B·L = {proj.tokens_per_update:,} tokens per update for every bar (B = {proj.tokens_per_update:,} / L), so "
            f"contexts are compared at equal tokens per update and the same 20·P budget. Counterfactual: "
            f"T' = T·(1 − f + f/k) for k = {', '.join(str(k) for k in SPEEDUPS)}, f the primary optimizer share; all "
            "other work is held constant."
        ],
        size=8,
    )
    _table(lower, [0.03, 0.0, 0.94, y - 0.02], header, rows, size=7.0 if len(rows) > 14 else 7.6)
    return fig


def page_methods(proj: Projection, ctx: Context) -> Figure:
    fig = Figure(figsize=PAGE)
    _header(fig, 6, "Methods and inputs")
    checks = ", ".join(f"{name} {n:,}" for name, n in sorted(ctx.checks.items()))
    items = [
        "Measurement (from the campaigns): each point is one complete forward, cross-entropy, backward, clipping and "
        "AdamW update per batch of B sequences of L tokens, no accumulation, BF16 autocast, FP32 weights and moments, "
        "a complete-update CUDA graph. After warm-up, calibration fixes the updates per window; synchronised windows "
        "are timed; a window's rate is updates·B·L / seconds and the point's rate is the median window rate. If the "
        "sample CV (stdev with n−1 over mean) exceeds the threshold, more windows count; remaining instability is "
        "flagged and only stable points compete for the fastest batch. " + protocol_text(ctx.protocols),
        "Optimizer timing: in the same allocation an uninstrumented baseline worker runs first, then an instrumented "
        "worker records CUDA events around ArenaAdamW.step inside the full-update graph. Events describe the last "
        "replay of each synchronised burst of replays; a window's optimizer ms weights bursts by their update "
        "counts; the primary share is the median window optimizer ms divided by the baseline's full-update ms "
        "(1000·B·L / R).",
        "Formulas: budget 20·P tokens; T = 20·P / R; time per 10⁹ tokens = 10⁹ / R; U = ceil(20·P / (B·L)) complete "
        "updates, U·B·L tokens, U·B·L / R seconds; context comparisons hold B·L fixed; optimizer k× faster: "
        "T' = T·(1 − f + f/k)"
        + (
            "; energy E = 20·P · J/token / 3.6e6 kWh, a window's J/token its counter's joules over its tokens"
            + ("; emissions E·G / 1000 kg CO2e" if proj.carbon_intensity is not None else "")
            if proj.energy
            else ""
        )
        + ". "
        + EXCLUSIONS,
        "Independent checks re-derived by this report before drawing (counts): " + checks + ". Memory boundaries: "
        "fitting batches 1, 2, 4, … and a first CUDA OOM at twice the largest fitting batch (or the batch cap).",
        "Recommended batch B (page 1): "
        + THRESHOLD_SENTENCE.replace("the campaign's", "the report's")
        + f" Here T = {100 * _threshold(proj):.2f}%, from the baseline workers' windows.",
        f"Inputs: {ctx.input_files:,} files; inputs.sha256 beside this PDF lists the SHA-256 of every one "
        f"(SHA-256 of that list: {ctx.inputs_digest}).",
        *setup_text(ctx.setup_shares),
    ]
    items[1:1] = optimizer_text(ctx.protocols)
    y = _paragraphs(fig, 0.04, 0.9, items, size=8.4)
    header = ["Campaign", "manifest.json SHA-256", "Files", "SHA-256 of its lines in inputs.sha256"]
    rows = [[Path(c).name, m, f"{n:,}", d] for c, m, n, d in ctx.campaign_digests]
    _table(fig, [0.03, 0.05, 0.94, y - 0.07], header, rows, size=6.6, widths=[0.18, 0.37, 0.05, 0.37])
    return fig


def setup_text(shares: list[tuple[str, str]]) -> list[str]:
    """What each campaign's jobs spent compiling and capturing against what they measured."""
    if not shares:
        return []
    return [
        "Campaign cost (the scheduler's elapsed time of the jobs with results): "
        + "; ".join(f"{Path(name).name}: {line.removeprefix('Setup: ')}" for name, line in shares)
        + "."
    ]


def _threshold(proj: Projection) -> float:
    return next((c.recommendation.threshold for c in proj.curves if c.recommendation), 0.0)


def build_pdf(proj: Projection, ctx: Context, path: Path) -> None:
    """Draw the six pages, verify page count and page text with pypdf, write `path`."""
    pages = [
        page_summary(proj, ctx),
        page_throughput_memory(proj),
        page_optimizer(proj),
        page_training_time(proj),
        page_context(proj),
        page_methods(proj, ctx),
    ]
    for page in pages:
        figures.stamp(page, ctx.banner)
    raw = io.BytesIO()
    with PdfPages(raw, metadata={"CreationDate": None, "Creator": "throughput-report"}) as pdf:
        for page in pages:
            pdf.savefig(page)
    raw.seek(0)
    reader = PdfReader(raw)
    if len(reader.pages) != PAGES:
        raise RuntimeError(f"the report has {len(reader.pages)} pages, expected {PAGES}")
    for number, (printed, marker) in enumerate(zip(reader.pages, PAGE_MARKERS), start=1):
        text = printed.extract_text()
        if marker not in text or (ctx.banner and "TEST WORKER" not in text):
            raise RuntimeError(
                f"page {number} of the report lacks {marker!r}" + (" or its banner" if ctx.banner else "")
            )
    writer = PdfWriter()
    writer.append(reader)
    writer.add_metadata(
        {
            "/Title": "Training-time estimates at 20 tokens per parameter",
            "/Creator": "throughput-report",
            "/Subject": f"inputs.sha256 SHA-256 {ctx.inputs_digest}",
        }
    )
    with open(path, "wb") as handle:
        writer.write(handle)
