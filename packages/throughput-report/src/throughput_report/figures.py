"""The five figures. Each draws into a matplotlib Figure or SubFigure, so the same
code makes the standalone files (PDF, SVG, 450-dpi PNG) and the PDF report's pages."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

from throughput_report.projections import Point, Projection  # noqa: E402

PNG_DPI = 450
GIB = 1024**3
FIGURE_SIZE = (11.0, 4.6)
FIGURES = ("throughput", "memory", "optimizer-share", "training-time", "context-comparison")

plt.rcParams.update(
    {
        "font.size": 9,
        "axes.titlesize": 10,
        "axes.labelsize": 9,
        "legend.fontsize": 8.5,
        "xtick.labelsize": 8,
        "ytick.labelsize": 8,
        "pdf.fonttype": 42,  # TrueType: the PDF's text stays extractable
        "svg.fonttype": "none",
        "svg.hashsalt": "throughput-report",
        "axes.grid": True,
        "grid.alpha": 0.3,
    }
)


def model_colors(models: list[str]) -> dict[str, tuple]:
    cmap = plt.get_cmap("tab10")
    return {m: cmap(i % 10) for i, m in enumerate(models)}


def context_colors(contexts: list[int]) -> dict[int, tuple]:
    cmap = plt.get_cmap("viridis")
    n = max(1, len(contexts) - 1)
    return {c: cmap(0.1 + 0.75 * i / n) for i, c in enumerate(contexts)}


def _by_curve(points: list[Point]) -> dict[tuple[str, int], list[Point]]:
    out: dict[tuple[str, int], list[Point]] = {}
    for p in points:
        out.setdefault((p.model, p.context), []).append(p)
    return out


def _batch_axis(ax, batches: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted(set(batches))
    if len(ticks) > 7:  # keep every other tick so labels never touch
        ticks = ticks[:: math.ceil(len(ticks) / 6)]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{int(v):,}"))
    ax.set_xlabel("batch B (sequences)")


def _panels(container, n: int, *, sharey: bool = False):
    axes = container.subplots(1, n, squeeze=False, sharey=sharey)[0]
    return list(axes)


def _legend(container, handles, labels, ncol: int) -> None:
    container.legend(handles, labels, loc="lower center", ncol=ncol, frameon=False, bbox_to_anchor=(0.5, 0.0))


def _model_handles(models, colors):
    return [Line2D([], [], color=colors[m], marker="o", lw=1.6) for m in models], list(models)


def draw_throughput(container, proj: Projection) -> None:
    """Tokens/s vs batch, one panel per context; solid primary, dashed original sweep."""
    colors = model_colors(proj.models)
    curves = _by_curve(proj.points)
    axes = _panels(container, len(proj.contexts), sharey=True)
    for ax, context in zip(axes, proj.contexts):
        batches = []
        for model in proj.models:
            pts = curves.get((model, context), [])
            if not pts:
                continue
            xs = [p.batch for p in pts]
            batches += xs
            ax.plot(xs, [p.tokens_per_second for p in pts], color=colors[model], marker="o", ms=3.5, lw=1.6)
            ax.plot(xs, [p.original_tokens_per_second for p in pts], color=colors[model], ls="--", lw=1.0, alpha=0.8)
            unstable = [p for p in pts if p.unstable]
            if unstable:
                ax.plot(
                    [p.batch for p in unstable],
                    [p.tokens_per_second for p in unstable],
                    ls="none",
                    marker="o",
                    ms=7,
                    mfc="none",
                    mec="red",
                    mew=1.2,
                )
        _batch_axis(ax, batches or [1])
        ax.set_yscale("log")
        ax.set_title(f"context {context:,}")
    axes[0].set_ylabel("tokens / s")
    handles, labels = _model_handles(proj.models, colors)
    handles += [
        Line2D([], [], color="0.3", lw=1.6),
        Line2D([], [], color="0.3", ls="--", lw=1.0),
        Line2D([], [], ls="none", marker="o", mfc="none", mec="red"),
    ]
    labels += ["baseline (primary)", "original sweep", "unstable (CV > 5%)"]
    _legend(container, handles, labels, len(labels))
    container.suptitle("Throughput vs batch", fontsize=11, fontweight="bold")
    container.subplots_adjust(left=0.07, right=0.99, top=0.86, bottom=0.27, wspace=0.08)


def draw_memory(container, proj: Projection) -> None:
    """Reserved memory peak vs batch, with the GPU's capacity and each first OOM."""
    colors = model_colors(proj.models)
    curves = _by_curve(proj.points)
    oom = {(c.model, c.context): c.first_oom_batch for c in proj.curves}
    capacity = max((p.gpu_memory_bytes for p in proj.points), default=0)
    gpu = next((p.gpu_name for p in proj.points if p.gpu_name), "GPU")
    axes = _panels(container, len(proj.contexts), sharey=True)
    for ax, context in zip(axes, proj.contexts):
        batches = []
        for model in proj.models:
            pts = [
                (p.batch, p.measurement_reserved_bytes)
                for p in curves.get((model, context), [])
                if p.measurement_reserved_bytes is not None
            ]
            xs = [batch for batch, _ in pts]
            batches += xs
            ax.plot(xs, [reserved / GIB for _, reserved in pts], color=colors[model], marker="o", ms=3.5)
            first = oom.get((model, context))
            if first and capacity:
                batches.append(first)
                ax.plot(
                    [first], [capacity / GIB], ls="none", marker="X", ms=8, color=colors[model], mec="black", mew=0.6
                )
        if capacity:
            ax.axhline(capacity / GIB, color="black", lw=1.0, ls=":")
        if not batches:
            ax.text(
                0.5,
                0.5,
                "the points ran on the CPU:\nno GPU memory to plot",
                transform=ax.transAxes,
                ha="center",
                va="center",
                fontsize=8,
            )
        _batch_axis(ax, batches or [1])
        ax.set_title(f"context {context:,}")
        ax.set_ylim(0, (capacity / GIB) * 1.12 if capacity else None)
    axes[0].set_ylabel("reserved peak (GiB)")
    handles, labels = _model_handles(proj.models, colors)
    handles += [Line2D([], [], color="black", ls=":"), Line2D([], [], ls="none", marker="X", color="0.5", mec="black")]
    labels += [f"capacity: {gpu}, {capacity / GIB:.1f} GiB", "first CUDA OOM"]
    _legend(container, handles, labels, len(labels))
    container.suptitle("Memory vs batch (baseline worker, measurement peak)", fontsize=11, fontweight="bold")
    container.subplots_adjust(left=0.07, right=0.99, top=0.86, bottom=0.27, wspace=0.08)


def draw_optimizer_share(container, proj: Projection) -> None:
    """Optimizer ms / baseline full-update ms, per batch."""
    colors = model_colors(proj.models)
    curves = _by_curve(proj.points)
    axes = _panels(container, len(proj.contexts), sharey=True)
    for ax, context in zip(axes, proj.contexts):
        batches = []
        for model in proj.models:
            pts = curves.get((model, context), [])
            xs = [p.batch for p in pts]
            batches += xs
            ax.plot(xs, [100 * p.optimizer_share for p in pts], color=colors[model], marker="o", ms=3.5)
            flagged = [p for p in pts if p.instrumented_change_flag or p.optimizer_unstable]
            if flagged:
                ax.plot(
                    [p.batch for p in flagged],
                    [100 * p.optimizer_share for p in flagged],
                    ls="none",
                    marker="o",
                    ms=7,
                    mfc="none",
                    mec="red",
                    mew=1.2,
                )
        _batch_axis(ax, batches or [1])
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}%"))
        ax.set_title(f"context {context:,}")
    axes[0].set_ylabel("optimizer share of update")
    handles, labels = _model_handles(proj.models, colors)
    handles.append(Line2D([], [], ls="none", marker="o", mfc="none", mec="red"))
    labels.append("flagged: instrumented wall change or optimizer CV > 5%")
    _legend(container, handles, labels, len(labels))
    container.suptitle(
        "Optimizer share vs batch (median window optimizer ms / baseline update ms)", fontsize=11, fontweight="bold"
    )
    container.subplots_adjust(left=0.07, right=0.99, top=0.86, bottom=0.27, wspace=0.08)


def draw_training_time(container, proj: Projection) -> None:
    """Projected time to 20 tokens per parameter, per model and context, at the fastest stable batch."""
    ccolors = context_colors(proj.contexts)
    best = {(c.model, c.context): c.best for c in proj.curves if c.best}
    ax = container.subplots(1, 1)
    n = len(proj.contexts)
    width = 0.8 / max(1, n)
    for j, context in enumerate(proj.contexts):
        xs, hs, lo, hi = [], [], [], []
        for i, model in enumerate(proj.models):
            p = best.get((model, context))
            if p is None:
                continue
            h = p.projected_seconds / 3600
            xs.append(i - 0.4 + width * (j + 0.5))
            hs.append(h)
            lo.append(h - p.projected_seconds_fastest_window / 3600)
            hi.append(p.projected_seconds_slowest_window / 3600 - h)
        ax.bar(xs, hs, width=width * 0.92, color=ccolors[context], label=f"context {context:,}")
        ax.errorbar(xs, hs, yerr=[lo, hi], fmt="none", ecolor="black", elinewidth=0.9, capsize=2.5)
    ax.set_yscale("log")
    ax.set_xticks(range(len(proj.models)))
    params = {c.model: c.parameters for c in proj.curves}
    ax.set_xticklabels(
        [
            f"{m}\n({params.get(m, 0) / 1e6:,.1f}M params,\n{20 * params.get(m, 0) / 1e9:.2f}B tokens)"
            for m in proj.models
        ]
    )
    ax.grid(axis="x", visible=False)
    ax.set_ylabel("hours at T = 20·P / R")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.legend(loc="upper left", ncol=n, frameon=False)
    ax.set_title(
        "error bars: fastest to slowest measurement window of the run (within-run variation, "
        "not a confidence interval)",
        fontsize=8.5,
    )
    container.suptitle(
        "Projected training time at 20 tokens per parameter (fastest stable batch, baseline rate)",
        fontsize=11,
        fontweight="bold",
    )
    container.subplots_adjust(left=0.07, right=0.99, top=0.84, bottom=0.22)


def draw_context_comparison(container, proj: Projection) -> None:
    """Time per model across contexts at fixed B·L, with the optimizer 2× and 4× faster."""
    variants = [
        ("measured", None, "0.25"),
        ("optimizer 2× faster", "counterfactual_2x_seconds", "tab:blue"),
        ("optimizer 4× faster", "counterfactual_4x_seconds", "tab:cyan"),
    ]
    axes = _panels(container, len(proj.models))
    for ax, model in zip(axes, proj.models):
        contexts = [c for c in proj.contexts if (model, c) in proj.comparison]
        for k, (label, attr, color) in enumerate(variants):
            xs = [i + (k - 1) * 0.27 for i in range(len(contexts))]
            hs = [getattr(proj.comparison[(model, c)], attr or "projected_seconds") / 3600 for c in contexts]
            ax.bar(xs, hs, width=0.25, color=color, label=label)
        ax.set_xticks(range(len(contexts)))
        ax.set_xticklabels([f"{c:,}\nB={proj.comparison[(model, c)].batch}" for c in contexts])
        ax.grid(axis="x", visible=False)
        ax.set_title(model)
        ax.set_xlabel("context L")
        missing = [c for c in proj.contexts if c not in contexts]
        if missing:
            ax.text(
                0.5,
                0.97,
                "does not fit at " + ", ".join(f"{c:,}" for c in missing),
                transform=ax.transAxes,
                ha="center",
                va="top",
                fontsize=7.5,
                color="0.3",
            )
    axes[0].set_ylabel("hours at T = 20·P / R")
    handles, labels = axes[0].get_legend_handles_labels()
    _legend(container, handles, labels, len(labels))
    container.suptitle(
        f"Context comparison at fixed B·L = {proj.tokens_per_update:,} tokens per update "
        "(counterfactual: optimizer k× faster, all other work unchanged)",
        fontsize=11,
        fontweight="bold",
    )
    container.subplots_adjust(left=0.07, right=0.99, top=0.86, bottom=0.3, wspace=0.28)


DRAW = {
    "throughput": draw_throughput,
    "memory": draw_memory,
    "optimizer-share": draw_optimizer_share,
    "training-time": draw_training_time,
    "context-comparison": draw_context_comparison,
}


def stamp(fig, banner: str) -> None:
    """A test worker's banner across the foot of a figure or page, so no copy of it
    passes for a measurement."""
    if banner:
        fig.text(0.5, 0.004, banner, ha="center", va="bottom", fontsize=7, color="#b00000", fontweight="bold")


def save_figure(name: str, proj: Projection, folder: Path, *, banner: str = "") -> list[Path]:
    """One figure as PDF, SVG and 450-dpi PNG; returns the files written."""
    fig = Figure(figsize=FIGURE_SIZE)
    DRAW[name](fig, proj)
    stamp(fig, banner)
    out = []
    for ext, kw in (
        ("pdf", {"metadata": {"CreationDate": None}}),
        ("svg", {"metadata": {"Date": None}}),
        ("png", {"dpi": PNG_DPI}),
    ):
        path = Path(folder) / f"{name}.{ext}"
        fig.savefig(path, format=ext, **kw)
        out.append(path)
    return out
