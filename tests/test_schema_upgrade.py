"""`throughput-schema upgrade`: a campaign run by today's code on the local scheduler (the
scripted worker, no GPU, no Slurm), rewritten as schema version 1 wrote it, is refused by
every reader with the command to run, comes back from the upgrade as today's code wrote
it, audits and collects clean, and a second upgrade has nothing to do."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import msgspec
import pytest

from campaign_helpers import ROOT, SWEEP, run_program, scripted_campaign, sweep, write_plan
from throughput_audit.audit import run_audit
from throughput_schema import Manifest, WorkerResult, read
from version_one import as_version_one

pytestmark = pytest.mark.slow  # a whole campaign on the local scheduler

SCHEMA = [sys.executable, "-m", "throughput_schema.cli"]
AUDIT = [sys.executable, "-m", "throughput_audit.cli"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("upgrade")
    return scripted_campaign(tmp / "camp", "local", write_plan(tmp, {"20m-c512-b4": "cuda_oom"}, ok_seconds=0.05))


@pytest.fixture
def old(finished, tmp_path) -> Path:
    camp = Path(shutil.copytree(finished, tmp_path / "camp"))
    as_version_one(camp)
    return camp


def _logs(camp: Path) -> list[str]:
    return sorted(p.relative_to(camp).as_posix() for p in camp.glob("curves/*/b*/attempt-*/*.out"))


def _records(camp: Path) -> dict[str, bytes]:
    return {
        p.relative_to(camp).as_posix(): p.read_bytes()
        for p in sorted(camp.rglob("*"))
        if p.is_file() and p.suffix in (".json", ".csv") and ".local-jobs" not in p.parts
    }


def schema(*args) -> tuple[int, str, str]:
    proc = run_program(SCHEMA, *args)
    return proc.returncode, proc.stdout, proc.stderr


def test_a_version_1_campaign_is_refused_by_its_readers_with_the_command_to_run(old):
    for program in (AUDIT, SWEEP):
        args = ("--output", old) if program is AUDIT else ("status", "--output", old)
        proc = run_program(program, *args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert "Traceback" not in proc.stderr
        assert "written with schema version 1, older than this tool's 2" in line, line
        assert f"throughput-schema upgrade {old}`" in line, line


def test_the_upgrade_rewrites_a_version_1_campaign_as_todays_code_wrote_it_once(finished, old):
    assert _logs(old) != _logs(finished)  # slurm-<id>.out, as the local scheduler named them
    code, out, err = schema("upgrade", old)
    assert code == 0 and not err, out + err
    assert f"{old}: upgraded to schema version 2" in out and f"{len(_logs(finished))} job outputs renamed" in out
    assert _logs(old) == _logs(finished)
    assert "frozen copy" in out  # a frozen watchdog is the one thing it cannot change
    today, upgraded = _records(finished), _records(old)
    for rel in ("manifest.json", "results.csv"):
        assert upgraded[rel] == today[rel], rel
    for rel in [r for r in today if r.endswith("receipt.json")]:
        assert _unknown_to_older_registries(json.loads(upgraded[rel])) == _unknown_to_older_registries(
            json.loads(today[rel])
        ), rel
    _the_registry_and_results_are_todays(finished, old)
    assert json.loads(upgraded["results.json"])["points"] == json.loads(today["results.json"])["points"]
    assert [_unknown_to_older_registries(r) for r in json.loads(upgraded["results.json"])["receipts"]] == [
        _unknown_to_older_registries(r) for r in json.loads(today["results.json"])["receipts"]
    ]
    assert json.loads(upgraded["results.json"])["profile"] == json.loads(today["results.json"])["profile"]
    report = run_audit(old, settle_seconds=0, allow_test_worker=True).report
    assert [c.message for c in report.checks if c.status == "fail"] == []
    assert report.scheduler_accounting == "checked"
    assert sweep("collect", "--output", old).returncode == 0
    assert sweep("status", "--output", old).returncode == 0
    before = _records(old)
    code, out, _ = schema("upgrade", old)
    assert code == 0 and out == f"{old}: already at schema version 2; nothing to do\n"
    assert _records(old) == before


def _unknown_to_older_registries(obj: dict) -> dict:
    """A local job's receipt less what an older registry did not record (the machine's CPUs
    and memory, which its accounting then gives as requested) and the registry's own text."""
    acc = obj["accounting"]
    acc.pop("raw")
    for key in ("cpus", "memory_bytes"):
        acc["allocation"].pop(key)
    return obj


def _the_registry_and_results_are_todays(finished: Path, old: Path) -> None:
    """The registry is today's but for the machine it did not record, each result names the
    worker and writer today's code named, without the version the file did not say."""
    for path in sorted((finished / ".local-jobs").glob("*.json")):
        today = json.loads(path.read_text())
        upgraded = json.loads((old / ".local-jobs" / path.name).read_text())
        if "machine_cpus" in today:
            assert (upgraded["machine_cpus"], upgraded["machine_mem"]) == (0, "")
            today.update(machine_cpus=0, machine_mem="")
        assert upgraded == today, path.name
    results = sorted(finished.glob("curves/*/b*/attempt-*/*.json"))
    named = 0
    for path in (p for p in results if p.name in ("result.json", "baseline.json")):
        today = read(path, WorkerResult)
        upgraded = read(old / path.relative_to(finished), WorkerResult)
        assert upgraded.worker == msgspec.structs.replace(today.worker, version=""), path
        assert upgraded == msgspec.structs.replace(today, worker=upgraded.worker), path
        named += 1
    assert named >= 2


def test_a_version_2_campaign_written_before_the_neutral_names_takes_them(finished, tmp_path):
    camp = Path(shutil.copytree(finished, tmp_path / "camp"))
    for name in ("manifest.json", "results.json"):
        data = json.loads((camp / name).read_text())
        profile = data["profile"]
        data["profile"] = {("extra_sbatch_args" if k == "extra_submit_args" else k): v for k, v in profile.items()}
        data["profile"]["extra_sbatch_args"] = ["--qos=x"]
        (camp / name).write_text(json.dumps(data, indent=2) + "\n")
    for log in camp.glob("curves/*/b*/attempt-*/local-*.out"):
        log.rename(log.with_name("slurm-" + log.name.removeprefix("local-")))
    assert _logs(camp) != _logs(finished)
    code, out, err = schema("upgrade", camp)
    assert code == 0 and not err, out + err
    assert f"{camp}: upgraded to schema version 2, 2 files rewritten, {len(_logs(finished))} job outputs" in out
    assert read(camp / "manifest.json", Manifest).profile.extra_submit_args == ["--qos=x"]
    assert json.loads((camp / "results.json").read_text())["profile"]["extra_submit_args"] == ["--qos=x"]
    assert "extra_sbatch_args" not in (camp / "manifest.json").read_text() + (camp / "results.json").read_text()
    assert _logs(camp) == _logs(finished)
    assert schema("upgrade", camp)[1] == f"{camp}: already at schema version 2; nothing to do\n"


def test_a_folder_of_campaigns_upgrades_each(old, tmp_path):
    shutil.copytree(old, tmp_path / "more" / "a")
    shutil.copytree(old, tmp_path / "more" / "b")
    code, out, _ = schema("upgrade", tmp_path / "more")
    assert code == 0 and out.count("upgraded to schema version 2") == 2, out


@pytest.mark.parametrize(
    "rel, damage, says",
    [
        ("curves/20m-c512/b1/attempt-1/receipt.json", b'{"token": "t", "job', "not valid JSON"),
        ("curves/20m-c512/b2/attempt-1/result.json", b"[1, 2]", "not a JSON object"),
        ("curves/20m-c512/b2/attempt-1/intent.json", b'{"schema_version": 1, "token": 3}', "Expected `str`"),
    ],
)
def test_an_unreadable_file_refuses_the_upgrade_in_one_line_and_nothing_changes(old, rel, damage, says):
    (old / rel).write_bytes(damage)
    before = _records(old)
    code, out, err = schema("upgrade", old)
    assert code == 2 and not out and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"throughput-schema: {old / rel}: ") and says in line, line
    assert "nothing was rewritten" in line
    assert _records(old) == before


def test_a_folder_without_a_campaign_is_one_line(tmp_path):
    code, out, err = schema("upgrade", tmp_path)
    assert code == 2 and not out
    assert err.strip() == (
        f"throughput-schema: {tmp_path} holds no manifest.json, nor do the folders in it: "
        "give a campaign folder (the one `throughput-sweep run` created)"
    )


def test_the_committed_examples_are_at_the_current_version():
    examples = sorted((ROOT / "docs/examples").glob("*/*/manifest.json"))
    assert examples
    for manifest in examples:
        code, out, _ = schema("upgrade", manifest.parent)
        assert code == 0 and "nothing to do" in out, out


def test_without_the_slurm_reader_a_version_1_row_refuses_in_one_line(old, monkeypatch, capsys):
    """The schema reads no sacct text: where throughput-slurm is not installed (no entry point),
    a version-1 row it must read refuses the upgrade, naming the package, before any write."""
    from throughput_schema import cli, upgrade_accounting

    monkeypatch.setattr(upgrade_accounting, "entry_points", lambda **_: ())
    receipt = next(old.glob("curves/*/b*/attempt-*/receipt.json"))
    obj = json.loads(receipt.read_text())
    obj["accounting_final"] = False  # a receipt whose row the local registry does not replace
    receipt.write_text(json.dumps(obj))
    before = _records(old)
    assert cli.main(["upgrade", str(old)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "throughput-slurm" in line and "nothing was rewritten" in line, line
    assert _records(old) == before
