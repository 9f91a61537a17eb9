"""The figures of `throughput-sweep collect`: throughput, energy, memory and optimizer time against batch.

Each is drawn off screen (Agg) and written atomically as PNG.
"""

from __future__ import annotations

import io
from pathlib import Path

from throughput_schema import WorkerResult, write_atomic
from throughput_sweep.curves import Curve

GIB = 1024**3


def memory_bytes(r: WorkerResult | None, phase: str, kind: str):
    """A result's peak GPU memory in bytes for a phase (setup, measurement) and kind (allocated,
    reserved); None where the worker recorded none (a CPU run)."""
    if r is None or r.memory is None:
        return None
    peaks = getattr(r.memory, phase)
    return getattr(peaks, f"{kind}_bytes") if peaks is not None else None


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    return plt, fig, ax


def _save(plt, fig, ax, path: Path, ylabel: str, title: str, empty: str = "no measured points yet") -> Path:
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch (sequences per update)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, empty, transform=ax.transAxes, ha="center")
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return write_atomic(path, buf.getvalue())


def plot_throughput(path: Path, curves: list[Curve], optimizer: bool) -> Path:
    plt, fig, ax = _figure()
    for c in curves:
        xs = [b for b in c.fitting if c.points[b].tokens_per_second]
        if not xs:
            continue
        ys = [c.points[b].tokens_per_second for b in xs]
        (line,) = ax.plot(xs, ys, marker="o", label=c.name)
        unstable = [(b, c.points[b].tokens_per_second) for b in xs if b in c.unstable]
        if unstable:
            ax.scatter(*zip(*unstable), facecolors="white", edgecolors=line.get_color(), zorder=3)
        if c.first_oom:
            ax.axvline(c.first_oom, color=line.get_color(), ls=":", alpha=0.5)
    title = (
        "baseline throughput (uninstrumented)" if optimizer else "throughput (median window); dotted: first CUDA OOM"
    )
    title += "; hollow: unstable"
    return _save(plt, fig, ax, path, "tokens per second", title)


def plot_energy(path: Path, curves: list[Curve], optimizer: bool) -> Path | None:
    """Median joules per token against batch, styled as `plot_throughput`; None (nothing
    written) where no point measured energy: no empty figure stands in for a measurement."""
    drawn = [(c, [b for b in c.fitting if c.points[b].joules_per_token is not None]) for c in curves]
    drawn = [(c, xs) for c, xs in drawn if xs]
    if not drawn:
        return None
    plt, fig, ax = _figure()
    for c, xs in drawn:
        ys = [c.points[b].joules_per_token for b in xs]
        (line,) = ax.plot(xs, ys, marker="o", label=c.name)
        unstable = [(b, c.points[b].joules_per_token) for b in xs if b in c.unstable]
        if unstable:
            ax.scatter(*zip(*unstable), facecolors="white", edgecolors=line.get_color(), zorder=3)
        if c.first_oom:
            ax.axvline(c.first_oom, color=line.get_color(), ls=":", alpha=0.5)
    title = "baseline energy per token (uninstrumented)" if optimizer else "GPU energy per token (median window)"
    title += "; dotted: first CUDA OOM; hollow: unstable"
    return _save(plt, fig, ax, path, "joules per token (GPU board counter)", title)


def plot_memory(path: Path, curves: list[Curve], optimizer: bool) -> Path:
    plt, fig, ax = _figure()
    measured = 0
    for c in curves:
        pts = []
        for b in c.fitting:
            info = c.points[b]
            r = info.measured
            measured += 1
            values = [
                v
                for v in (memory_bytes(r, "setup", "reserved"), memory_bytes(r, "measurement", "reserved"))
                if v is not None
            ]
            if values:
                pts.append((b, max(values) / GIB))
        if pts:
            ax.plot(*zip(*pts), marker="o", label=f"{c.name} reserved peak")
    # A worker without a GPU records no GPU memory at all: say why the plot is empty.
    empty = "the points ran on the CPU: no GPU memory to plot" if measured else "no measured points yet"
    return _save(plt, fig, ax, path, "GiB", "peak reserved GPU memory (setup or measurement)", empty)


def plot_optimizer(path: Path, rows: list[dict], key: str, ylabel: str) -> Path:
    plt, fig, ax = _figure()
    by_curve: dict[str, list[dict]] = {}
    for r in rows:
        by_curve.setdefault(r["curve"], []).append(r)
    for name, rs in sorted(by_curve.items()):
        rs.sort(key=lambda r: r["batch_size"])
        ax.plot([r["batch_size"] for r in rs], [r[key] for r in rs], marker="o", label=name)
    return _save(plt, fig, ax, path, ylabel, ylabel)
