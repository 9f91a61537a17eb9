"""A campaign's setup share: what its jobs spent before measuring, against their elapsed time.

Each job counts once, with the scheduler's elapsed seconds and every result its workers
wrote (an optimizer point's job runs two: its baseline and its instrumented worker). The
setup is each result's own `setup_seconds`, split into `SETUP_PHASES`; the startup is the
interpreter and imports before it. `status`, collect's README and the report all print
`SetupShare.line()`, so the three say the same words.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from throughput_schema.results import SETUP_PHASES, WorkerResult


@dataclass(frozen=True)
class SetupShare:
    jobs: int
    elapsed: float  # the jobs' summed elapsed seconds (the scheduler's)
    startup: float | None  # processes' start to setup (interpreter, imports); None: no result recorded it
    phases: dict[str, float]  # setup phase -> summed seconds
    setup: float  # summed setup_seconds
    measured: float  # summed window seconds
    # Setups that used the compile cache (cold or warm, `WorkerResult.compile_cache`), and the warm ones.
    cached: int = 0
    warm: int = 0

    def line(self) -> str:
        """'' where no job has both a result and an elapsed time yet."""
        if not self.jobs or self.elapsed <= 0:
            return ""
        before = (self.startup or 0.0) + self.setup
        split = ", ".join(f"{k.replace('_', ' ')} {v:,.0f} s" for k, v in self.phases.items())
        startup = "not recorded" if self.startup is None else f"{self.startup:,.0f} s"
        return (
            f"Setup: {before:,.0f} s of {self.elapsed:,.0f} s of job time ({before / self.elapsed:.0%}) over "
            f"{self.jobs} job(s): startup {startup}, setup {self.setup:,.0f} s"
            + (f" ({split})" if split else "")
            + f"; measured windows {self.measured:,.0f} s ({self.measured / self.elapsed:.0%})"
            + (f"; {self.warm} of {self.cached} setups warm (loaded a saved compile)" if self.cached else "")
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "jobs": self.jobs,
            "elapsed_seconds": self.elapsed,
            "startup_seconds": self.startup,
            "setup_seconds": self.setup,
            "setup_phases": self.phases,
            "measured_seconds": self.measured,
            "cached_setups": self.cached,
            "warm_setups": self.warm,
        }


def setup_share(jobs: Iterable[tuple[float | None, Sequence[WorkerResult | None]]]) -> SetupShare:
    """`jobs`: each job's elapsed seconds (None while the scheduler has not said) and its results;
    a job without both does not count."""
    count, elapsed, setup, measured = 0, 0.0, 0.0, 0.0
    startup: float | None = None
    cached, warm = 0, 0
    phases: dict[str, float] = {}
    for seconds, maybe in jobs:
        results = [r for r in maybe if r is not None]
        if seconds is None or not results:
            continue
        count += 1
        elapsed += seconds
        for r in results:
            if r.startup_seconds is not None:
                startup = (startup or 0.0) + r.startup_seconds
            setup += r.setup_seconds or 0.0
            measured += sum(w.seconds for w in r.windows)
            if r.compile_cache is not None and r.compile_cache.state != "off":
                cached += 1
                warm += r.compile_cache.state == "warm"
            for k, v in r.setup_phases.items():
                phases[k] = phases.get(k, 0.0) + v
    order = {k: i for i, k in enumerate(SETUP_PHASES)}
    phases = dict(sorted(phases.items(), key=lambda kv: order.get(kv[0], len(order))))
    return SetupShare(count, elapsed, startup, phases, setup, measured, cached, warm)
