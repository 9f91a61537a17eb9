"""What collect published from the receipts against the receipt files: results.json's copy
of every receipt (its accounting included) and the accounting columns of each point in
results.json and results.csv. With `jobs.check_receipt_copy` holding each receipt to what
sacct or the local registry says now, every accounting figure published equals it too."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import msgspec

from throughput_audit.campaign import AttemptRecord, Loaded
from throughput_audit.findings import Checks
from throughput_schema import Receipt
from throughput_schema.layout import RESULTS_CSV, RESULTS_JSON

# The point columns collect takes from the receipt, and how.
_COLUMNS = {
    "job_id": lambda rec: rec.job_id,
    "job_state": lambda rec: rec.accounting.state if rec.accounting else "",
    "job_elapsed_seconds": lambda rec: _text(rec.accounting.elapsed_seconds if rec.accounting else None),
}


def _text(value: object) -> str:
    """A value as results.csv writes it, and as results.json's is compared: None as ""."""
    return "" if value is None else str(value)


def check_published_accounting(root: Path, loaded: Loaded, checks: Checks) -> None:
    try:
        results = msgspec.json.decode((root / RESULTS_JSON).read_bytes())
        table = list(csv.DictReader(io.StringIO((root / RESULTS_CSV).read_text())))
    except (OSError, UnicodeDecodeError, msgspec.DecodeError, csv.Error):
        return  # not collected yet, or unreadable: the summary checks say which
    if not isinstance(results, dict):
        return
    receipts = {r.rel: r for r in loaded.attempts if r.attempt.receipt is not None}
    for item in results.get("receipts") or []:
        if not isinstance(item, dict):
            continue
        where = str(item.get("path"))
        r = receipts.get(where)
        want = msgspec.to_builtins(r.attempt.receipt) if r else None
        got = _as_receipt({k: v for k, v in item.items() if k != "path"})
        differ = _differences(got, want) if want is not None else ["the attempt has no receipt"]
        checks.expect(
            "published.receipt",
            not differ,
            RESULTS_JSON,
            f"{RESULTS_JSON}: the receipt published for {where} "
            + ("differs from its receipt.json: " + "; ".join(differ) if differ else "equals its receipt.json"),
            path=where,
        )
    for name, rows in ((RESULTS_JSON, results.get("points") or []), (RESULTS_CSV, table)):
        for row in rows:
            if isinstance(row, dict):
                _check_point(name, row, receipts, checks)


def _check_point(name: str, row: dict, receipts: dict[str, AttemptRecord], checks: Checks) -> None:
    where = f"curves/{row.get('curve')}/b{row.get('batch_size')}/attempt-{row.get('attempt')}"
    r = receipts.get(where)
    if r is None or str(row.get("job_id") or "") == "":
        return  # an attempt without a receipt publishes no accounting
    rec = r.attempt.receipt
    assert rec is not None, "`receipts` holds only attempts with a receipt"
    differ = [
        f"{col} {row.get(col)!r}, receipt {want(rec)!r}"
        for col, want in _COLUMNS.items()
        if _text(row.get(col)) != want(rec)
    ]
    checks.expect(
        "published.accounting",
        not differ,
        name,
        f"{name}: {where} " + ("; ".join(differ) if differ else f"job {rec.job_id} as its receipt.json"),
        path=where,
    )


def _as_receipt(published: dict) -> dict:
    """The published copy read as a receipt record: a field it predates counts at its default,
    as it does in the receipt.json it was copied from. Kept as written if it is no receipt."""
    try:
        return msgspec.to_builtins(msgspec.convert(published, Receipt))
    except (msgspec.ValidationError, TypeError):
        return published


def _differences(got: dict, want: dict, at: str = "") -> list[str]:
    out = []
    for key in sorted(set(got) | set(want)):
        a, b = got.get(key), want.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{at}{key}.")
        elif a != b:
            out.append(f"{at}{key} {a!r}, receipt.json {b!r}")
    return out
