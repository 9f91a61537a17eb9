"""A site that accounts GPUs by type alone, on the real local Slurm: `tools/local-slurm.sh
gpu-type-set h100` declares the node's GPUs as `gpu:h100` and tracks `gres/gpu:h100` only
(AccountingStorageTRES), so sacct's AllocTRES reads `gres/gpu:h100=1` and names no `gres/gpu`.
The campaign's receipts keep that row; the sweep reads one GPU per job from it (its GPU-hours),
and the audit accepts the allocation. `gpu-type-set none` restores the untyped node."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest

from campaign_helpers import FAST, profile, receipts, slurm_tool, sweep, write_plan
from optimizer_campaigns import audit
from throughput_slurm.sacct import raw_row

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_exclusive, pytest.mark.slow]


@contextmanager
def typed_gpus(kind: str):
    slurm_tool("gpu-type-set", kind)
    try:
        yield
    finally:
        slurm_tool("gpu-type-set", "none")


def test_gpus_accounted_by_type_alone_count_in_the_sweep_and_pass_the_audit(local_slurm, tmp_path):
    out = tmp_path / "camp"
    prof = profile(tmp_path)
    grid = ["--models", "20m", "--contexts", "512", "--max-batch", "2"]
    with typed_gpus("h100"):
        run = sweep("run", "--output", out, "--profile", prof, *grid, *FAST, plan=write_plan(tmp_path, {}), timeout=600)
        assert run.returncode == 0, run.stdout + run.stderr
        found = receipts(out)
        assert len(found) == 2, found  # batches 1 and 2
        rows = [raw_row(r["accounting"]["raw"]) for r in found]
        for row in rows:  # what the site's Slurm wrote: the type alone
            assert row is not None
            assert "gres/gpu:h100=1" in row.alloc_tres and "gres/gpu=" not in row.alloc_tres, row.alloc_tres
        assert [r["accounting"]["allocation"]["gpus"] for r in found] == [1, 1]
        status = sweep("status", "--output", out, timeout=120)
        assert "GPU-hours so far: " in status.stdout and "over 2 job(s)" in status.stdout, status.stdout
        collect = sweep("collect", "--output", out, timeout=300)
        assert collect.returncode == 0, collect.stdout + collect.stderr
        checked = audit(out)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report = json.loads((out / "audit.json").read_text())
    allocation = [c for c in report["checks"] if c["name"] == "slurm.allocation"]
    assert allocation and all(c["status"] == "pass" for c in allocation), allocation
