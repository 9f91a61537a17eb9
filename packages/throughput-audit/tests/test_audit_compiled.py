"""A copy of a campaign without its compiled artifacts (tools/h200/e2e.sh packs none): the
audit fails a warm setup whose artifact is missing and says how to audit such a copy; with
--no-compiled it names each warm setup as not checked, and fails nothing for it."""

from __future__ import annotations

from pathlib import Path

from campaign_builder.cache_faults import saved_artifact
from campaign_builder.planting import build, replace_fields
from throughput_audit import cli
from throughput_audit.audit import run_audit


def copy_without_artifacts(tmp_path: Path):
    p = build(tmp_path, "throughput")
    loaded = saved_artifact(p, "20m-c512", 1)
    p.rewrite_result("20m-c512", 1, replace_fields(compile_cache=loaded))
    artifact = p.built.root / loaded.artifact
    assert artifact.is_file()
    artifact.unlink()  # as the pack leaves it out; its sidecar stays
    return p, loaded


def cache_checks(outcome):
    return [(c.status, c.message) for c in outcome.report.checks if c.name == "setup.cache"]


def test_a_missing_artifact_fails_and_names_the_flag_for_a_copy(tmp_path):
    p, loaded = copy_without_artifacts(tmp_path)
    outcome = run_audit(p.built.root, runner=p.sacct, settle_seconds=0)
    [(status, message)] = cache_checks(outcome)
    assert status == "fail" and f"{loaded.artifact} is missing" in message and "--no-compiled" in message
    assert {c.name for c in outcome.report.checks if c.status == "fail"} == {"setup.cache"}


def test_no_compiled_names_each_warm_setup_as_not_checked(tmp_path, capsys):
    p, loaded = copy_without_artifacts(tmp_path)
    outcome = run_audit(p.built.root, runner=p.sacct, settle_seconds=0, compiled_checks=False)
    [(status, message)] = cache_checks(outcome)
    assert status == "not_applicable" and f"{loaded.artifact} not checked (--no-compiled)" in message
    assert outcome.report.summary.failed == 0 and outcome.report.summary.not_applicable >= 1
    # The command line: the same, and the flag changes nothing else (the sacct the builder
    # planned is not on this machine, so the Slurm checks are skipped as a user would).
    assert cli.main(["--output", str(p.built.root), "--no-slurm", "--no-compiled"]) == 0
    assert "0 failed" in capsys.readouterr().out
    assert cli.main(["--output", str(p.built.root), "--no-slurm"]) == 1
    assert "FAIL setup.cache" in capsys.readouterr().out
