"""Publishing a comparison: every file written atomically into a hidden folder beside
OUT, which is renamed to OUT at the end, so OUT never holds half a comparison."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from throughput_compare import figures, tables
from throughput_compare.inputs import Refused
from throughput_schema.codec import dumps, fsync_dir, write_atomic
from throughput_schema.comparison import Comparison
from throughput_schema.layout import COMPARISON_CSV as CSV
from throughput_schema.layout import COMPARISON_JSON as JSON
from throughput_schema.layout import COMPARISON_MD as MARKDOWN
from throughput_schema.layout import COMPARISON_PDF as PDF


def refuse_output(out: Path, campaigns: list[Path]) -> None:
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise Refused(f"output {out} exists and is not a folder; choose a new output folder")
    if out.is_dir() and any(out.iterdir()):
        raise Refused(f"output {out} is not empty; comparisons are never overwritten, choose a new output folder")
    resolved = out.resolve()
    for campaign in campaigns:
        root = Path(campaign).resolve()
        if resolved == root or root in resolved.parents:
            raise Refused(f"output {out} lies inside input campaign {campaign}; choose an output folder outside it")


def contents(c: Comparison) -> dict[str, bytes | str]:
    return {
        MARKDOWN: tables.markdown(c),
        CSV: tables.csv_text(c),
        JSON: dumps(c),
        **figures.figure_files(c),
        PDF: figures.comparison_pdf(c),
    }


def publish(out: Path, c: Comparison) -> list[Path]:
    """Write every file, then move the folder into place; nothing is left on failure."""
    out = Path(out)
    files = contents(c)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        for name, data in files.items():
            write_atomic(staging / name, data)
        os.chmod(staging, 0o755)
        # rename(2) replaces an empty folder, and fails if one appeared non-empty meanwhile.
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(out.parent)
    return [out / name for name in files]
