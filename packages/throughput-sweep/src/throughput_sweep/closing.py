"""`throughput-sweep close-curve`: a person's decision that a blocked curve ends where it stands.

A failure that repeats on every retry (a host memory limit, a compile error, the
deadline) would keep its curve blocked forever, and a blocked curve keeps the report
from accepting the campaign. The closure records who decided, when, why, and the failed
attempt it closes on; it never marks a memory boundary.
"""

from __future__ import annotations

import getpass
import socket

from throughput_schema import CurveClosure, write_atomic
from throughput_schema.layout import closure_path
from throughput_sweep.campaign import Campaign, CampaignError, now
from throughput_sweep.curves import last_failure


def close_curve(campaign: Campaign, name: str, reason: str) -> str:
    """Write the curve's closure; the caller holds the campaign lock. Returns what was done."""
    if campaign.optimizer:
        # A follow-up measures its parent's whole grid: a point it cannot measure is retried,
        # or the parent's curve is closed below it in a new campaign.
        raise CampaignError(
            f"{campaign.root}: close-curve ends throughput curves; an optimizer campaign measures its parent's "
            "whole grid (retry the point with run --resume --retry-failed)"
        )
    reason = " ".join(reason.split())
    if not reason:
        raise CampaignError("--reason: say in a line why the curve ends here (it is kept in the record)")
    curves = {c.name: c for c in campaign.curves()}
    curve = curves.get(name)
    if curve is None:
        raise CampaignError(f"{name}: no such curve in {campaign.root}; its curves are {', '.join(curves)}")
    if curve.state == "closed":
        assert curve.closure is not None, "a curve is closed together with its closure"
        raise CampaignError(f"{name}: already closed by hand ({curve.closure.reason})")
    if curve.state != "blocked" or curve.running:
        raise CampaignError(
            f"{name} is {curve.state}{' with jobs running' if curve.running else ''}, not blocked: "
            "only a curve that a failure blocks can be closed"
        )
    last = last_failure(curve)
    assert last is not None, "a blocked curve is blocked by a failed attempt"
    if last.status == "ambiguous":
        raise CampaignError(
            f"{name}: its last attempt is an ambiguous submission; settle it first with "
            f"throughput-sweep reconcile --output {campaign.root} --token {last.attempt.token}"
        )
    closure = CurveClosure(
        curve=name,
        batch_size=last.batch,
        attempt=last.number,
        outcome=last.outcome,
        reason=reason,
        closed_at=now(),
        user=getpass.getuser(),
        host=socket.gethostname(),
    )
    write_atomic(closure_path(campaign.root, name), closure)
    return f"{name}: closed by hand at batch {last.batch} (attempt {last.number}, {last.outcome}): {reason}"
