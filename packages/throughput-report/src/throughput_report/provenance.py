"""What the report's figures rest on: refusing a test worker's campaigns (unless allowed,
then a banner), and the protocol and hardware lines of page 1, worded by the schema as
status, collect and the audit word them."""

from __future__ import annotations

from throughput_report.inputs import Refused, ReportCampaign
from throughput_schema import provenance
from throughput_schema.provenance import WorkerRefused


def _workers(campaign: ReportCampaign) -> list[str]:
    """The manifest's worker and every worker a result names, in order of appearance."""
    names = [campaign.manifest.worker]
    for a in campaign.attempts:
        for result in (a.result, a.baseline):
            if result is not None and result.worker.module not in names:
                names.append(result.worker.module)
    return names


def worker_banner(campaigns: list[ReportCampaign], *, allow_test_worker: bool) -> str:
    """The banner every page and file carries when a test worker is allowed, else "";
    raises Refused for a test worker's campaign without the permission."""
    try:
        return provenance.worker_banner(
            ((c.name, w) for c in campaigns for w in _workers(c)), allow_test_worker=allow_test_worker
        )
    except WorkerRefused as exc:
        raise Refused(str(exc)) from None


def notes(campaigns: list[ReportCampaign]) -> list[str]:
    """Page 1's lines on the protocol against the guide's (docs/guide.md) and on mixed hardware, as sentences."""
    lines = provenance.notes(
        [(c.name, c.manifest.protocol) for c in campaigns],
        (r for c in campaigns for a in c.attempts for r in (a.result, a.baseline)),
    )
    return [line[0].upper() + line[1:] + "." for line in lines]
