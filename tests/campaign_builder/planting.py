"""Planting faults in finished campaigns: what a fault may edit (`Planted`), a row of the
audit's planted-fault table (`Fault`), the campaigns they are planted in, and whether the
audit caught one. The faults are in `faults` and `campaign_faults`; the table is
packages/throughput-audit/tests/test_planted_faults.py.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from campaign_builder.complete import BuiltCampaign, build_optimizer, build_throughput
from campaign_builder.energy import add_energy
from campaign_builder.fake_sacct import FakeSacct
from campaign_builder.results import throughput_of
from throughput_audit.audit import run_audit
from throughput_schema import Hardware, WorkerResult
from throughput_schema.layout import MANIFEST, RESULTS_JSON

H200 = Hardware(gpu_name="NVIDIA H200", gpu_memory_bytes=150_754_820_096, gpu_count=1, gpu_uuid="GPU-0")


@dataclass
class Planted:
    """What a fault may edit: the campaign's files, and what sacct will answer."""

    built: BuiltCampaign
    sacct: FakeSacct
    tmp: Path
    parent: BuiltCampaign | None = None

    def donor(self, **build) -> BuiltCampaign:
        """Another campaign of the same name whose jobs sacct knows too: points to graft in."""
        donor = build_throughput(self.tmp / "donor" / self.built.root.name, start_id=3000, **build)
        self.sacct.rows.update(donor.rows)
        return donor

    def folder(self, curve: str, batch: int) -> Path:
        return self.built.points[curve][batch]

    def edit(self, rel: str | Path, change: Callable[[dict], object]) -> None:
        path = self.built.root / rel
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data, indent=2))

    def edit_point(self, curve: str, batch: int, name: str, change: Callable[[dict], object]) -> None:
        self.edit(self.folder(curve, batch) / name, change)

    def rewrite_result(
        self, curve: str, batch: int, change: Callable[[WorkerResult], WorkerResult], name: str = "result.json"
    ) -> None:
        """A forger's edit: change the record, then make every derived figure agree with it."""
        path = self.folder(curve, batch) / name
        res = change(msgspec.json.decode(path.read_bytes(), type=WorkerResult))
        if res.throughput is not None:
            m = res.recipe.model
            tp = throughput_of(res.windows, res.recipe.training.micro_batch_size, m.context_length, res.protocol)
            res = msgspec.structs.replace(res, throughput=tp)
        path.write_bytes(msgspec.json.encode(res))

    def job(self, curve: str, batch: int) -> str:
        return json.loads((self.folder(curve, batch) / "receipt.json").read_text())["job_id"]

    def sacct_row(self, curve: str, batch: int, **changes) -> None:
        job = self.job(curve, batch)
        self.sacct.rows[job] = msgspec.structs.replace(self.sacct.rows[job], **changes)


Plant = Callable[[Planted], object]


@dataclass(frozen=True)
class Fault:
    name: str
    plant: Plant
    check: str
    # Checks the same edit necessarily fails as well (the expected one must still be among them).
    also: frozenset[str] = field(default_factory=frozenset)
    campaign: str = "throughput"  # "throughput", "optimizer", "local", "capped" or "energy"
    # Not caught yet: what will catch it. The row's test is a strict xfail until then.
    pending: str = ""


def replace_fields(**changes) -> Callable[[WorkerResult], WorkerResult]:
    return lambda r: msgspec.structs.replace(r, **changes)


def build(tmp_path: Path, kind: str) -> Planted:
    if kind == "optimizer":
        parent = build_throughput(tmp_path / "tp", unstable={"20m-c512": [2]})
        opt = build_optimizer(tmp_path / "opt", parent)
        return Planted(built=opt, sacct=opt.sacct(), tmp=tmp_path, parent=parent)
    if kind == "capped":
        built = build_throughput(tmp_path / "tp", contexts=(512,), first_oom=16)
        # The same points with --max-batch 4 would have stopped at b4: remove b8 and the OOM.
        for b in (8, 16):
            shutil.rmtree(built.points["20m-c512"][b].parent)
            del built.points["20m-c512"][b]
        manifest = json.loads((built.root / MANIFEST).read_text())
        manifest["max_batch"] = 4
        (built.root / MANIFEST).write_text(json.dumps(manifest))
        summary = json.loads((built.root / RESULTS_JSON).read_text())
        summary["curves"][0].update(
            state="capped",
            first_oom_batch=None,
            fitting_batches=[1, 2, 4],
            largest_fitting_batch=4,
            fastest_stable_batch=4,
        )
        (built.root / RESULTS_JSON).write_text(json.dumps(summary))
        return Planted(built=built, sacct=built.sacct(), tmp=tmp_path)
    built = build_throughput(
        tmp_path / "tp", unstable={"20m-c512": [2]}, scheduler="local" if kind == "local" else "slurm"
    )
    if kind == "energy":
        # The GPU's counter read around every window, and Slurm recording each job's energy.
        add_energy(built)
    return Planted(built=built, sacct=built.sacct(), tmp=tmp_path)


def failed_checks(p: Planted) -> set[str]:
    out = run_audit(p.built.root, runner=p.sacct, settle_seconds=0)
    return {c.name for c in out.report.checks if c.status == "fail"}


def caught(fault: Fault, tmp_path: Path) -> tuple[bool, set[str]]:
    """Whether the audit caught `fault` by its check, and nothing it should not have failed."""
    p = build(tmp_path, fault.campaign)
    fault.plant(p)
    failed = failed_checks(p)
    return fault.check in failed and failed <= {fault.check, *fault.also}, failed
