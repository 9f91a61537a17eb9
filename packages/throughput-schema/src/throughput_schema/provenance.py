"""What a campaign's figures rest on, said the same way by every tool that shows them:
which worker measured them, how their protocol differs from the guide's, and whether
their points ran on one kind of hardware and software.

status, collect, the audit and the report all print these lines from here, so a
campaign is described alike wherever its figures appear.
"""

from __future__ import annotations

from collections.abc import Iterable

from throughput_schema.configs import Protocol
from throughput_schema.precision import precision_deviation
from throughput_schema.results import Hardware, WorkerResult

# The only worker whose results are measurements; any other (`--worker scripted_worker`)
# is a test double and passes the audit, the report and the comparison only with --allow-test-worker.
PRODUCTION_WORKER = "tiny_llm"
ALLOW_TEST_WORKER = "--allow-test-worker"

# The guide's measurement protocol (docs/guide.md, "What one point measures"): 20 warm-up
# and 5 calibration updates, 5 windows of about 10 s (at least 20 updates each), 5 more
# when the CV exceeds 5%, 0.1 s bursts.
GUIDE = Protocol()
_MEASUREMENT = (
    ("warmup", "{} warm-up updates", "{}"),
    ("calibration_updates", "{} calibration updates", "{}"),
    ("windows", "{} windows", "{}"),
    ("window_seconds", "{:g} s windows", "{:g} s"),
    ("min_updates_per_window", "at least {} updates per window", "{}"),
    ("extra_windows", "{} extra windows", "{}"),
    ("cv_threshold", "a CV threshold of {:.1%}", "{:.1%}"),
    ("burst_seconds", "{:g} s optimizer bursts", "{:g} s"),
)

# Per point, the hardware and software a figure depends on (collect's columns), and
# what a campaign's points must share to be compared as one curve.
# column -> (its label, its plural when points differ)
_COLUMNS = {
    "gpu_name": ("GPU", "GPU models"),
    "gpu_memory_bytes": ("memory", "GPU memory sizes"),
    "driver": ("driver", "drivers"),
    "cuda": ("CUDA", "CUDA versions"),
    "torch": ("torch", "torch versions"),
    "python": ("compute Python", "compute Pythons"),
}
HARDWARE_COLUMNS = tuple(_COLUMNS)
HARDWARE_LABELS = {column: label for column, (label, _) in _COLUMNS.items()}


def is_test_worker(worker: str) -> bool:
    return worker != PRODUCTION_WORKER


def worker_warning(worker: str) -> str | None:
    """What status and collect say of a campaign a test worker ran; None for the production worker."""
    if not is_test_worker(worker):
        return None
    return f"TEST WORKER {worker}: not measured by {PRODUCTION_WORKER}; no figure here describes real hardware"


def allowed_worker_banner(worker: str) -> str:
    """The banner on every output of a campaign a test worker wrote (audit, report)."""
    return f"{worker_warning(worker)} (allowed by {ALLOW_TEST_WORKER})"


def worker_refusal(worker: str, where: str) -> str:
    """Why a test worker's campaign is refused, in one line."""
    return (
        f"{where}: campaign run with test worker {worker!r}, not the production worker {PRODUCTION_WORKER!r}; "
        f"its figures were never measured (give {ALLOW_TEST_WORKER} to let a test through)"
    )


class WorkerRefused(Exception):
    """A test worker's campaign without the permission; the message is worker_refusal's line."""


def worker_banner(workers: Iterable[tuple[str, str]], *, allow_test_worker: bool) -> str:
    """Of (campaign, worker) pairs (each campaign's manifest and results name a worker):
    the banner every output carries when test workers are allowed, "" when none is a test
    worker; raises WorkerRefused naming the first test worker's campaign otherwise."""
    tests: list[str] = []
    for where, worker in workers:
        if is_test_worker(worker):
            if not allow_test_worker:
                raise WorkerRefused(worker_refusal(worker, where))
            if worker not in tests:
                tests.append(worker)
    return " ".join(allowed_worker_banner(w) for w in tests)


def protocol_deviation(protocol: Protocol) -> str | None:
    """One line naming every measurement setting that differs from the guide's, or None."""
    differences = [
        f"{text.format(getattr(protocol, name))} (guide: {guide.format(getattr(GUIDE, name))})"
        for name, text, guide in _MEASUREMENT
        if getattr(protocol, name) != getattr(GUIDE, name)
    ]
    return "protocol differs from the guide: " + ", ".join(differences) if differences else None


def hardware_of(result: WorkerResult | None) -> Hardware | None:
    """The hardware of a result that measured something (a failure record names none)."""
    if result is None or result.throughput is None:
        return None
    return result.hardware


def hardware_value(hardware: Hardware, column: str) -> str:
    value = getattr(hardware, column)
    if column == "gpu_memory_bytes":
        return f"{value / 1024**3:.1f} GiB" if value else ""
    return str(value)


def hardware_mix(hardwares: Iterable[Hardware | None]) -> str | None:
    """One line naming what differs between the points' hardware or software, or None.

    Blank values (a CPU run has no driver) are not a difference: they say nothing.
    """
    seen: dict[str, list[str]] = {column: [] for column in HARDWARE_COLUMNS}
    for hardware in hardwares:
        if hardware is None:
            continue
        for column in HARDWARE_COLUMNS:
            value = hardware_value(hardware, column)
            if value and value not in seen[column]:
                seen[column].append(value)
    mixed = [f"{_COLUMNS[c][1]} {' / '.join(values)}" for c, values in seen.items() if len(values) > 1]
    return "points ran on different hardware or software: " + "; ".join(mixed) if mixed else None


def guide_deviations(protocol: Protocol) -> list[str]:
    """Every line saying how a campaign differs from the guide: its measurement settings, its
    precision, its optimizer."""
    from throughput_schema.muon import optimizer_deviation

    lines = (protocol_deviation(protocol), precision_deviation(protocol.precision), optimizer_deviation(protocol))
    return [line for line in lines if line]


def notes(protocols: list[tuple[str, Protocol]], results: Iterable[WorkerResult | None]) -> list[str]:
    """The lines beside a campaign's figures: its protocol against the guide's (once when
    every campaign (name, protocol) shares it, else per campaign) and mixed hardware."""
    deviations = [(name, "\n".join(guide_deviations(protocol))) for name, protocol in protocols]
    if len({line for _, line in deviations}) == 1:
        out = deviations[0][1].split("\n") if deviations[0][1] else []
    else:
        out = [f"{name}: {line}" for name, lines in deviations for line in lines.split("\n") if line]
    mixed = hardware_mix(map(hardware_of, results))
    return out + ([mixed] if mixed else [])
