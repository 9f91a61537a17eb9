"""Every record that crosses a process or a file, gathered from the modules that define
them (`configs`, `results`, `campaigns`, `request`, `audit`) into one namespace and one table of kinds.

Conventions (msgspec's own advice): records are frozen; every field added within a
schema version gets a default so files of that version still decode, and every record
skips fields it does not know, so an older reader can still read a newer writer's output
of the same version. A change that old files cannot decode into raises `SCHEMA_VERSION`,
and `upgrade` rewrites a campaign of the version before. That holds for configuration embedded in records too (a result's recipe, a
manifest's profile and protocol). A typo in what a user writes is still an error: its
loaders convert it with `codec.convert_input`, which refuses fields `unknown_field` finds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from throughput_schema.audit import AuditReport, AuditSummary, Check, CurveFinding
from throughput_schema.campaigns import (
    CurveClosure,
    CurveSummary,
    FailedAttempt,
    FrozenFile,
    Manifest,
    ModelSource,
    ParentCampaign,
    Receipt,
    Settlement,
    SpotCheck,
    SubmissionIntent,
)
from throughput_schema.compile_cache import CacheArtifact, CacheKey, CompileCache
from throughput_schema.configs import (
    ClusterProfile,
    Llama3RopeScaling,
    ModelConfig,
    OptimizerConfig,
    PointSpec,
    Protocol,
    Recipe,
    TrainingConfig,
)
from throughput_schema.energy import Energy, EnergySource, WindowEnergy
from throughput_schema.job_accounting import JobAccounting, JobAllocation
from throughput_schema.request import WorkerRequest
from throughput_schema.results import (
    BurstSample,
    Calibration,
    Fp8Linears,
    Hardware,
    MemoryPeaks,
    MemoryReport,
    OptimizerTiming,
    Throughput,
    Window,
    WorkerIdentity,
    WorkerResult,
)

__all__ = [
    "AuditReport",
    "AuditSummary",
    "BurstSample",
    "CacheArtifact",
    "CacheKey",
    "Calibration",
    "Check",
    "ClusterProfile",
    "CurveClosure",
    "CurveFinding",
    "CurveSummary",
    "CompileCache",
    "Energy",
    "EnergySource",
    "FailedAttempt",
    "FrozenFile",
    "Hardware",
    "JobAccounting",
    "JobAllocation",
    "Manifest",
    "MemoryPeaks",
    "Fp8Linears",
    "MemoryReport",
    "Llama3RopeScaling",
    "ModelConfig",
    "ModelSource",
    "OptimizerConfig",
    "OptimizerTiming",
    "ParentCampaign",
    "PointSpec",
    "Protocol",
    "Receipt",
    "Recipe",
    "Settlement",
    "SpotCheck",
    "SubmissionIntent",
    "Throughput",
    "TrainingConfig",
    "Window",
    "WindowEnergy",
    "WorkerIdentity",
    "WorkerRequest",
    "WorkerResult",
    "RECORD_TYPES",
    "unknown_field",
]

RECORD_TYPES: dict[str, type] = {
    "recipe": Recipe,
    "cluster-profile": ClusterProfile,
    "protocol": Protocol,
    "point-spec": PointSpec,
    "worker-result": WorkerResult,
    "submission-intent": SubmissionIntent,
    "receipt": Receipt,
    "job-accounting": JobAccounting,
    "manifest": Manifest,
    "curve-summary": CurveSummary,
    "curve-closure": CurveClosure,
    "worker-request": WorkerRequest,
    "audit-report": AuditReport,
    "cache-artifact": CacheArtifact,
}


def unknown_field(raw: Mapping[str, Any], type_: type[msgspec.Struct], at: str = "$") -> str | None:
    """The first key of user input that `type_` (or a record nested in it) has no field
    for, as one line naming it, where it is and what would be accepted; None if none."""
    fields = {f.encode_name: f.type for f in msgspec.structs.fields(type_)}
    for key, value in raw.items():
        if key not in fields:
            known = ", ".join(name for name in fields if name != "schema_version")
            return f"unknown field `{key}` at `{at}`; {type_.__name__} fields are {known}"
        nested = fields[key]
        if isinstance(value, Mapping) and isinstance(nested, type) and issubclass(nested, msgspec.Struct):
            found = unknown_field(value, nested, f"{at}.{key}")
            if found:
                return found
    return None
