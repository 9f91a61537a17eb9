"""The ratio figure (B/A per curve against batch, with uncertainty bars and the noise
band) as PDF, SVG and PNG, and the two-page comparison.pdf: the summary table and the
differences, then the figure."""

from __future__ import annotations

import io
import textwrap

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.backends.backend_pdf import PdfPages  # noqa: E402

from throughput_compare import tables  # noqa: E402
from throughput_schema.comparison import Comparison  # noqa: E402

FIGURE = "ratios"
PNG_DPI = 450
PAGE = (8.27, 11.69)  # A4 portrait, inches
# The first page's text must stay legible: below this size, lines are cut and the
# page points to comparison.md.
MIN_FONT = 5.5
MAX_FONT = 9.0
WRAP = 100
# A monospaced glyph's advance as a fraction of the font size (DejaVu Sans Mono).
MONOSPACE_ADVANCE = 0.61
LINE_SPACING = 1.35


def ratio_figure(c: Comparison):
    fig, ax = plt.subplots(figsize=(8.0, 4.8))
    for curve in c.curves:
        mine = [p for p in c.points if p.curve == curve.curve]
        if not mine:
            continue
        ax.errorbar(
            [p.batch_size for p in mine],
            [p.ratio for p in mine],
            yerr=[p.ratio_uncertainty for p in mine],
            marker="o",
            capsize=3,
            label=curve.curve,
        )
    t = c.noise.threshold
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhspan(1.0 - t, 1.0 + t, color="grey", alpha=0.2, label=f"noise threshold ±{100 * t:.2f}%")
    ax.set_xscale("log", base=2)
    batches = sorted({p.batch_size for p in c.points})
    if batches:
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.minorticks_off()
    ax.set_xlabel("batch size (sequences per update)")
    ax.set_ylabel("tokens/s ratio B / A")
    ax.set_title("B against A per point (bars: ±u(r) from the window spreads)")
    ax.grid(True, which="both", alpha=0.3)
    if c.points:
        ax.legend(fontsize="small")
    fig.tight_layout(rect=(0, 0.03, 1, 1) if c.test_worker else None)
    stamp(fig, c.test_worker)
    return fig


def stamp(fig, banner: str) -> None:
    """A test worker's banner across the foot of a figure or page, so no copy of it
    passes for a measurement (the report stamps its pages alike)."""
    if banner:
        fig.text(0.5, 0.004, banner, ha="center", va="bottom", fontsize=7, color="#b00000", fontweight="bold")


def figure_files(c: Comparison) -> dict[str, bytes]:
    """ratios.pdf / .svg / .png as bytes, for the caller to write atomically."""
    fig = ratio_figure(c)
    out = {}
    try:
        # SVG text as text, not glyph paths: a reader (or grep) finds a test worker's banner.
        with matplotlib.rc_context({"svg.fonttype": "none"}):
            for ext, kw in (("pdf", {}), ("svg", {}), ("png", {"dpi": PNG_DPI})):
                buffer = io.BytesIO()
                fig.savefig(buffer, format=ext, **kw)
                out[f"{FIGURE}.{ext}"] = buffer.getvalue()
    finally:
        plt.close(fig)
    return out


def first_page_lines(c: Comparison) -> list[str]:
    rows = tables.curve_rows(c)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    table = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)) for r in rows]
    lines = [
        *(w for t in c.accepted for w in textwrap.wrap(t, WRAP)),
        *textwrap.wrap(c.summary, WRAP),
        "",
        f"A: {c.a}",
        f"B: {c.b}",
        f"kind: {c.kind}; made {c.created_at}",
        "",
    ]
    lines += ["Curves", *table, "", *tables.changes(c), "", "Noise and verdicts"]
    for text in [*tables.noise_lines(c), "", "Differences between the campaigns", *tables.difference_lines(c)]:
        lines += textwrap.wrap(text, WRAP, subsequent_indent="    ") or [""]
    return lines


def first_page(c: Comparison):
    """Page 1: the summary, the per-curve table, the noise and the differences, in type
    small enough to fit; what does not fit is left to comparison.md."""
    lines = first_page_lines(c)
    height, width = PAGE[1] * 72 * 0.9, PAGE[0] * 72 * 0.9
    widest = max((len(line) for line in lines), default=1)
    font = min(MAX_FONT, height / (LINE_SPACING * max(len(lines), 1)), width / (MONOSPACE_ADVANCE * widest))
    font = max(MIN_FONT, font)
    fit = int(height / (LINE_SPACING * font))
    if len(lines) > fit:
        lines = [*lines[: fit - 1], f"... {len(lines) - fit + 1} more lines in comparison.md"]
    page = plt.figure(figsize=PAGE)
    page.text(0.05, 0.96, "\n".join(lines), family="monospace", fontsize=font, va="top", linespacing=LINE_SPACING)
    stamp(page, c.test_worker)
    return page


def comparison_pdf(c: Comparison) -> bytes:
    buffer = io.BytesIO()
    with PdfPages(buffer) as pdf:
        for make in (first_page, ratio_figure):
            fig = make(c)
            try:
                pdf.savefig(fig)
            finally:
                plt.close(fig)
    return buffer.getvalue()
