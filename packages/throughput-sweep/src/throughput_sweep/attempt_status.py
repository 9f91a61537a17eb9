"""One attempt as the curve logic reads it: its files and settlement marker, and what they say
(status, outcome, message, the result its figures come from).

An optimizer point stands on two results, the instrumented run and its baseline: the rate is
always the baseline's, and the point is ok only when both are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from throughput_schema import Settlement, WorkerResult, outcome_kind
from throughput_schema.layout import Attempt, is_void
from throughput_schema.outcomes import Outcome, written_by_scheduler

Status = Literal["unsettled", "ambiguous", "abandoned", "refused", "submitted", "ok", "oom", "failed"]


@dataclass(frozen=True)
class AttemptInfo:
    """One attempt's files plus its settlement marker, if any."""

    attempt: Attempt
    settlement: Settlement | None = None
    optimizer: bool = False

    @property
    def batch(self) -> int:
        return self.attempt.batch_size

    @property
    def number(self) -> int:
        return self.attempt.attempt

    @property
    def job_id(self) -> str:
        return self.attempt.receipt.job_id if self.attempt.receipt else ""

    @property
    def ran_without_receipt(self) -> bool:
        """Its job ran (a result) but no receipt names the job: the campaign is not complete."""
        a = self.attempt
        return a.intent is not None and a.result is not None and a.receipt is None

    @property
    def status(self) -> Status:
        a = self.attempt
        if a.result is not None:
            kind = outcome_kind(a.result.outcome)
            if kind == "ok" and self.optimizer:  # an optimizer point stands on its baseline too
                kind = "baseline-missing" if a.baseline is None else outcome_kind(a.baseline.outcome)
            return "ok" if kind == "ok" else "oom" if kind == "cuda_oom" else "failed"
        if a.receipt is not None:
            return "submitted"
        if is_void(intent=a.intent is not None, receipt=False, result=False, settlement=self.settlement):
            return "abandoned"  # nothing was submitted: no intent, or one settled as never submitted
        if self.settlement is not None:
            state = self.settlement.state
            assert state != "never-submitted"  # is_void took it
            return state
        return "unsettled"

    @property
    def outcome(self) -> str:
        a = self.attempt
        if a.result is not None:
            kind = outcome_kind(a.result.outcome)
            if kind == "ok" and self.optimizer and (a.baseline is None or outcome_kind(a.baseline.outcome) != "ok"):
                return "baseline-missing" if a.baseline is None else f"baseline-{outcome_kind(a.baseline.outcome)}"
            return kind
        return self.status

    @property
    def message(self) -> str:
        a = self.attempt
        if a.result is not None:
            out = a.result.outcome
            if self.optimizer and outcome_kind(out) == "ok" and a.baseline is not None:
                out = a.baseline.outcome
            text = " ".join(x for x in (self._phase(out), out.message) if x)
            return text.replace("\n", " ")[:300]
        if self.settlement is not None:
            return self.settlement.reason
        return ""

    def _phase(self, outcome: Outcome) -> str:
        """A result the controller wrote from the scheduler's word, shown, names the scheduler
        the job ran on."""
        ran_on = self.attempt.receipt or self.attempt.intent
        return ran_on.scheduler if written_by_scheduler(outcome) and ran_on is not None else outcome.phase

    @property
    def measured(self) -> WorkerResult | None:
        """The result the point's figures come from: the rated one, else the result (no baseline)."""
        return self.rated or self.attempt.result

    @property
    def rated(self) -> WorkerResult | None:
        """The result the point's rate comes from: never an optimizer point's instrumented run."""
        return self.attempt.baseline if self.optimizer else self.attempt.result

    @property
    def tokens_per_second(self) -> float | None:
        r = self.rated
        return None if r is None or r.throughput is None else r.throughput.tokens_per_second

    @property
    def joules_per_token(self) -> float | None:
        """The rated result's median joules per token; None where it measured no energy."""
        r = self.rated
        return None if r is None or r.energy is None else r.energy.joules_per_token

    @property
    def unstable(self) -> bool:
        results = [r for r in (self.attempt.result, self.attempt.baseline if self.optimizer else None) if r is not None]
        return any(
            (r.throughput is not None and r.throughput.unstable)
            or (r.optimizer_timing is not None and r.optimizer_timing.unstable)
            for r in results
        )
