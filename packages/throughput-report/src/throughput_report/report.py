"""Build a report: read and pair, check, project, draw, then publish the files at once.

Everything is written into a hidden folder beside OUT and moved into place only
after the PDF has been verified, so OUT never holds half a report.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from throughput_report import figures, provenance, tables
from throughput_report.checks import run_checks
from throughput_report.energy import energy_absent
from throughput_report.inputs import Refused, ReportCampaign, load_campaign
from throughput_report.pairing import pair_campaigns
from throughput_report.pdf import Context, build_pdf
from throughput_report.projections import Projection, project
from throughput_schema.codec import fsync_dir, write_atomic
from throughput_schema.digests import sha256_bytes
from throughput_schema.layout import ACCOUNTING, AUDIT

REPORT_PDF = "report.pdf"
DATA_FILES = ("points.csv", "points.json", "inputs.sha256")
FIGURE_FILES = tuple(f"{name}.{ext}" for name in figures.FIGURES for ext in ("pdf", "svg", "png"))
REPORT_FILES = (REPORT_PDF, *DATA_FILES, *FIGURE_FILES)
# An output folder holding any of these (ours, or an audit's record of it) is never reused.
HELD = (*REPORT_FILES, AUDIT, ACCOUNTING)


@dataclass(frozen=True)
class BuiltReport:
    out: Path
    files: list[Path]
    projection: Projection
    checks: dict[str, int]
    banner: str = ""


def refuse_output(out: Path, campaigns: list[Path]) -> None:
    """OUT must not hold a report already, and must not lie inside an input campaign."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise Refused(f"output {out} exists and is not a directory; choose a new output directory")
    if out.is_dir():
        held = [name for name in HELD if (out / name).exists()]
        if held:
            raise Refused(
                f"output {out} already holds a report ({held[0]}); reports are never overwritten, "
                "choose a new output directory"
            )
    resolved = out.resolve()
    for campaign in campaigns:
        root = Path(campaign).resolve()
        if resolved == root or root in resolved.parents:
            raise Refused(f"output {out} lies inside input campaign {campaign}; choose a new output directory")


def _hash_lines(campaigns: list[ReportCampaign]) -> tuple[str, list[tuple[str, str, int, str]]]:
    lines, digests = [], []
    for c in campaigns:
        mine = [f"{sha}  {path}\n" for path, sha in c.hashes]
        lines += mine
        digests.append((c.name, c.manifest_sha256, len(mine), sha256_bytes("".join(mine))))
    return "".join(lines), digests


def build_report(
    throughput: list[Path],
    optimizer: list[Path],
    out: Path,
    *,
    tokens_per_update: int | None = None,
    allow_test_worker: bool = False,
    carbon_intensity: float | None = None,
) -> BuiltReport:
    throughput, optimizer, out = [Path(p) for p in throughput], [Path(p) for p in optimizer], Path(out)
    if len(throughput) != len(optimizer) or not throughput:
        raise Refused(
            f"{len(throughput)} throughput campaign(s) ({', '.join(map(str, throughput)) or 'none'}) but "
            f"{len(optimizer)} optimizer campaign(s) ({', '.join(map(str, optimizer)) or 'none'}); "
            "give one optimizer campaign per throughput campaign, paired by argument order"
        )
    given = throughput + optimizer
    duplicates = {str(p) for p in given if sum(q.resolve() == p.resolve() for q in given) > 1}
    if duplicates:
        raise Refused(f"campaign {sorted(duplicates)[0]} is given more than once")
    refuse_output(out, given)

    tc = [load_campaign(p) for p in throughput]
    oc = [load_campaign(p) for p in optimizer]
    banner = provenance.worker_banner(tc + oc, allow_test_worker=allow_test_worker)
    pairs = pair_campaigns(tc, oc)
    tally = run_checks(pairs)
    projection = project(pairs, tokens_per_update, carbon_intensity=carbon_intensity)
    if tokens_per_update and not projection.comparison:
        raise Refused(f"--tokens-per-update {tokens_per_update}: no fitting point has B·L = {tokens_per_update}")
    if carbon_intensity is not None and not projection.energy:
        raise Refused(
            f"--carbon-intensity {carbon_intensity:g}: no baseline worker of these campaigns measured energy "
            f"({energy_absent(pairs)}); there is no energy to turn into emissions"
        )

    read = [c for pair in pairs for c in (pair.throughput, pair.optimizer)]
    hash_text, digests = _hash_lines(read)
    shares = {c.name: c.setup_share() for c in read}
    inputs_digest = sha256_bytes(hash_text)
    gpus = sorted({p.gpu_name for p in projection.points if p.gpu_name})
    ctx = Context(
        pairs=[(p.throughput.name, p.optimizer.name) for p in pairs],
        gpu=", ".join(gpus)
        or ("the CPU" if all(p.measurement_reserved_bytes is None for p in projection.points) else "an unnamed GPU"),
        campaign_digests=digests,
        inputs_digest=inputs_digest,
        input_files=hash_text.count("\n"),
        checks=dict(tally.counts),
        protocols=[(c.name, c.manifest.protocol) for pair in pairs for c in (pair.throughput, pair.optimizer)],
        banner=banner,
        notes=tuple(provenance.notes(tc + oc)),
        setup_shares=[(name, share.line()) for name, share in shares.items() if share.line()],
    )
    inputs_doc = {
        **({"test_worker": banner} if banner else {}),
        "pairs": [{"throughput": t, "optimizer": o} for t, o in ctx.pairs],
        "inputs_sha256_digest": inputs_digest,
        "campaigns": [
            {"campaign": c, "manifest_sha256": m, "files": n, "digest": d, "setup_share": shares[c].to_dict()}
            for c, m, n, d in digests
        ],
    }

    _write(out, hash_text, projection, inputs_doc, ctx)
    return BuiltReport(
        out=out, files=[out / n for n in REPORT_FILES], projection=projection, checks=dict(tally.counts), banner=banner
    )


def _write(out: Path, hash_text: str, projection: Projection, inputs_doc: dict, ctx: Context) -> None:
    """Every file staged in a hidden folder beside OUT, then published."""
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    os.chmod(stage, 0o755)
    try:
        write_atomic(stage / "inputs.sha256", hash_text)
        write_atomic(stage / "points.csv", tables.points_csv(projection.points, ctx.banner))
        write_atomic(stage / "points.json", tables.points_json(projection, inputs_doc))
        for name in figures.FIGURES:
            figures.save_figure(name, projection, stage, banner=ctx.banner)
        build_pdf(projection, ctx, stage / REPORT_PDF)
        for name in REPORT_FILES:
            with open(stage / name, "rb") as handle:
                os.fsync(handle.fileno())
        _publish(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _publish(stage: Path, out: Path) -> None:
    """Move the staged files into OUT: one rename for a new folder, else file by file, PDF last."""
    if not out.exists():
        try:
            os.rename(stage, out)
            fsync_dir(out.parent)
            return
        except OSError:
            if not out.is_dir():
                raise
    refuse_output(out, [])
    for name in REPORT_FILES[1:] + (REPORT_PDF,):
        os.replace(stage / name, out / name)
    fsync_dir(out)
