"""Which worker wrote a campaign's results, and what its figures rest on.

A test worker writes records of the real shape, so only the worker each result names
tells its figures from measurements: the audit fails such a campaign unless the person
running it allows test workers, and then every output says so. The protocol and
hardware lines come from the schema, so the audit words them as status, collect and
the report do.
"""

from __future__ import annotations

from throughput_audit.campaign import Loaded
from throughput_audit.findings import Checks
from throughput_schema import provenance
from throughput_schema.layout import BASELINE, MANIFEST, RESULT
from throughput_schema.provenance import PRODUCTION_WORKER, allowed_worker_banner, is_test_worker, worker_refusal
from throughput_schema.records import WorkerResult


def check_worker(loaded: Loaded, checks: Checks, *, allow_test_worker: bool) -> str:
    """The manifest's worker is the production worker (or a test worker is allowed), and
    every result names that worker; returns the allowed test worker's name, or "" (a
    refused one is a failed check, not a banner)."""
    worker = loaded.manifest.worker
    test = is_test_worker(worker)
    checks.expect(
        "worker.production",
        not test or allow_test_worker,
        MANIFEST,
        worker_refusal(worker, MANIFEST)
        if test and not allow_test_worker
        else f"{MANIFEST}: worker {worker!r}" + (" (test worker, allowed)" if test else ""),
        worker=worker,
        production=PRODUCTION_WORKER,
    )
    for record in loaded.attempts:
        if record.void:
            continue
        for name, result in ((RESULT, record.attempt.result), (BASELINE, record.attempt.baseline)):
            if result is not None:
                _check_result_worker(record.file(name), result, worker, checks)
    return worker if test and allow_test_worker else ""


def _check_result_worker(file: str, result: WorkerResult, worker: str, checks: Checks) -> None:
    named = result.worker
    if named.written_by == "upgrade":
        # The result named no worker and its outcome does not tell who wrote it: the upgrade
        # named the manifest's, which only the production worker's campaigns could rest on.
        who = "an unknown writer (`throughput-schema upgrade` named the manifest's worker)"
    else:
        who = named.written_by
    checks.expect(
        "result.worker",
        named.module == worker and (named.written_by != "upgrade" or not is_test_worker(worker)),
        file,
        f"{file}: written by {who} for worker {named.module!r} {named.version or '(version not recorded)'}"
        + f"; the manifest's worker is {worker!r}",
        worker=named.module,
        version=named.version,
        written_by=named.written_by,
        manifest=worker,
    )


def notes(loaded: Loaded, test_worker: str) -> list[str]:
    """The lines every reader of the audit must see beside its counts."""
    m = loaded.manifest
    results = (
        r for record in loaded.attempts if not record.void for r in (record.attempt.result, record.attempt.baseline)
    )
    return ([allowed_worker_banner(test_worker)] if test_worker else []) + provenance.notes(
        [(m.name, m.protocol)], results
    )
