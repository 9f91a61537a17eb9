"""What the controller writes about a campaign and its submissions: the intent and
receipt of each job, the frozen manifest, and the derived curve summary."""

from __future__ import annotations

from typing import Literal

import msgspec

from throughput_schema.comparison import Recommendation
from throughput_schema.configs import (
    ClusterProfile,
    NonNegInt,
    PointSpec,
    PositiveInt,
    Protocol,
    SchedulerName,
    _Record,
)
from throughput_schema.curve_names import curve_name
from throughput_schema.job_accounting import JobAccounting
from throughput_schema.provenance import PRODUCTION_WORKER
from throughput_schema.scheduler_names import check_name

# ------------------------------------------------------------------------ submission


class SubmissionIntent(_Record, frozen=True):
    """Written and fsynced before the job is submitted: proof that a submission may exist."""

    token: str
    campaign: str
    point: PointSpec
    script_sha256: str
    created_at: str
    scheduler: SchedulerName

    def __post_init__(self) -> None:
        check_name(self.scheduler)


class Receipt(_Record, frozen=True):
    """Written after the scheduler accepted the job; final accounting added later."""

    token: str
    job_id: str
    submitted_at: str
    scheduler: SchedulerName
    # True when the job was found by its token after a crash.
    adopted: bool = False
    accounting: JobAccounting | None = None
    accounting_final: bool = False
    # Why the scheduler's accounting is not in this receipt although the job was settled
    # (its accounting failing or disabled while its queue no longer knew the job); '' otherwise.
    accounting_missing: str = ""

    def __post_init__(self) -> None:
        check_name(self.scheduler)


# -------------------------------------------------------------------------- campaign


class FrozenFile(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    sha256: str
    size: NonNegInt


class ModelSource(msgspec.Struct, frozen=True, kw_only=True):
    """A model given as a Hugging Face config.json: the file, and the sha256 of the bytes
    the campaign converted (its recipe is frozen under `frozen/recipes/` like a preset's)."""

    path: str
    sha256: str


class ParentCampaign(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    manifest_sha256: str
    name: str = ""


class SpotCheck(msgspec.Struct, frozen=True, kw_only=True):
    """A spot check re-measures a seeded sample of its parent's fitting points (the
    manifest's `parent` and `inherited_batches`), each curve's recommended batch always
    among them, with the parent's protocol and frozen sources."""

    points: PositiveInt
    seed: int
    recommended: dict[str, int] = {}  # curve -> the parent's recommended batch
    threshold: float = 0.0  # the parent's own noise threshold, the recommendation's


class ProfileReplacement(msgspec.Struct, frozen=True, kw_only=True):
    """`run --resume --profile` replaced the frozen profile, allowed only while no job of the
    campaign had ever been accepted (every submission refused), so no result ran under `old`."""

    replaced_at: str
    old: ClusterProfile
    old_sha256: str  # of the old profile's JSON encoding, as in the manifest
    new_name: str
    new_sha256: str


CampaignKind = Literal["throughput", "optimizer-timing"]


class Manifest(_Record, frozen=True):
    """Frozen at campaign creation: a resumed campaign never changes its grid."""

    kind: CampaignKind
    name: str
    created_at: str
    models: list[str]
    contexts: list[PositiveInt]
    protocol: Protocol
    profile: ClusterProfile
    tool_version: str
    frozen_files: list[FrozenFile] = []
    max_batch: PositiveInt | None = None
    parent: ParentCampaign | None = None
    # Optimizer campaigns: curve name -> the parent's fitting batches, in order.
    inherited_batches: dict[str, list[int]] = {}
    parallel_points: bool = False
    # The module run with `python -m` inside each job (the throughput worker by default).
    worker: str = PRODUCTION_WORKER
    # The repository the campaign was created from (frozen copies come from here).
    source_root: str = ""
    # A spot check of `parent` (a throughput campaign whose curves walk `inherited_batches`).
    spot_check: SpotCheck | None = None
    # Each replacement of `profile` before anything ran, oldest first (`profile` is the last new one).
    profile_replacements: list[ProfileReplacement] = []
    # The variables of the creating shell the scheduler's backend keeps from its commands and
    # from the jobs (Slurm's: `throughput_slurm.environment.slurm_environment`), with their values.
    scheduler_environment_removed: dict[str, str] = {}
    # Models given as a Hugging Face config.json (`hf_config`), by model name; presets have none.
    model_sources: dict[str, ModelSource] = {}
    # The zone of the shell that created the campaign, as TZ names it (`time_zones.local_zone`);
    # records keep instants with their offset, so this names the zone only for people.
    watcher_zone: str = ""

    def curves(self) -> list[str]:
        """The campaign's curve names, model by model, each model's contexts in order."""
        return [curve_name(m, c) for m in self.models for c in self.contexts]


class FailedAttempt(msgspec.Struct, frozen=True, kw_only=True):
    batch_size: PositiveInt
    attempt: PositiveInt
    job_id: str
    outcome: str
    message: str = ""


# Where a curve can stand; the states in CURVE_ENDED take no more points.
CurveState = Literal["pending", "running", "blocked", "bounded", "capped", "complete", "closed"]
CURVE_ENDED: frozenset[str] = frozenset({"blocked", "bounded", "capped", "complete", "closed"})


class CurveSummary(_Record, frozen=True):
    """Where a curve stands; derived from the files under `curves/`, never stored state."""

    curve: str
    model: str
    context_length: PositiveInt
    state: CurveState
    fitting_batches: list[int] = []
    fastest_stable_batch: int | None = None
    fastest_tokens_per_second: float | None = None
    largest_fitting_batch: int | None = None
    first_oom_batch: int | None = None
    unstable_batches: list[int] = []
    blocked_reason: str = ""
    failed_attempts: list[FailedAttempt] = []
    closure: CurveClosure | None = None  # state "closed": the person's decision
    # The smallest batch within the campaign's noise threshold of the fastest stable one.
    recommendation: Recommendation | None = None
    # The stable batch of the lowest median joules per token (None where none measured energy).
    most_efficient_batch: int | None = None
    most_efficient_joules_per_token: float | None = None


class CurveClosure(_Record, frozen=True):
    """A person's decision that a blocked curve ends where it stands (`curves/<curve>/closure.json`).

    Written by `throughput-sweep close-curve` for a failure that would repeat (a host
    memory limit, a compile error, the deadline). It names the failed attempt it closes
    on, so a later attempt makes it stale; it never marks a memory boundary.
    """

    curve: str
    batch_size: PositiveInt
    attempt: PositiveInt
    outcome: str  # the closed-on attempt's outcome kind, e.g. host_oom
    reason: str
    closed_at: str
    user: str
    host: str


SettlementState = Literal["never-submitted", "refused", "ambiguous"]
SettledBy = Literal["watcher", "user"]


class Settlement(msgspec.Struct, frozen=True, kw_only=True):
    """How an intent without a receipt was settled (`settlement.json` beside the intent).

    never-submitted: the scheduler has no job with the token (the attempt is void and the
    point is retried in a fresh attempt). refused: the scheduler rejected the submission
    for good (blocks the curve). ambiguous: more than one job, or the scheduler could not
    answer; the user settles it with `throughput-sweep reconcile`.
    """

    token: str
    state: SettlementState
    reason: str
    decided_at: str
    job_ids: list[str] = []
    by: SettledBy = "watcher"
