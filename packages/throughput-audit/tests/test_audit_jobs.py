"""The audit of a campaign's jobs against the scheduler's accounting (a fake sacct answering
from the jobs the builder laid out): resources, concurrency, lost jobs, batching."""

from __future__ import annotations

import json
import time

import msgspec
import pytest

from campaign_builder.auditing import audit, edit, failures, point
from campaign_builder.complete import build_throughput
from campaign_builder.files import receipt_ended
from throughput_audit import job_states, query_windows, slurm
from throughput_audit.allocation import mem_mib
from throughput_audit.audit import write_outputs
from throughput_schema.job_accounting import JobAccounting
from throughput_slurm.sacct import FIELDS, FORMAT, parse_rows


def test_peak_concurrency_over_the_limit_is_caught(tmp_path):
    built = build_throughput(tmp_path / "tp", contexts=(512, 1024, 2048), max_concurrent=2)
    out = audit(built)
    bad = failures(out)
    assert [c.name for c in bad] == ["slurm.peak_concurrency"]
    assert bad[0].values["peak"] == 3 and bad[0].values["limit"] == 2
    assert "peak 3 jobs running at once at 2026-10-08T12:00:02+00:00 (1000, 1004, 1008)" in bad[0].message
    assert "the campaign's limit is 2" in bad[0].message


def test_back_to_back_jobs_do_not_overlap(tmp_path):
    built = build_throughput(tmp_path / "tp", contexts=(512,), max_concurrent=1, job_seconds=150, stagger_seconds=150)
    assert failures(audit(built)) == []


def test_receipt_pointing_at_a_job_with_other_resources_is_caught(campaign):
    sacct = campaign.sacct()
    job = json.loads((point(campaign, "20m-c512", 2) / "receipt.json").read_text())["job_id"]
    sacct.rows[job] = msgspec.structs.replace(
        sacct.rows[job], alloc_tres="billing=2,cpu=2,mem=2G,node=1", timelimit="00:05:00", job_name="other", comment=""
    )
    out = audit(campaign, sacct)
    bad = failures(out, "slurm.allocation")
    assert len(bad) == 1
    msg = bad[0].message
    assert msg.startswith(f"curves/20m-c512/b2/attempt-1/receipt.json: job {job} ")
    for part in (
        "gres/gpu None, profile requires 1",
        "cpu '2', profile requires at least 8",
        "mem '2G', profile requires at least 64G",
        "timelimit '00:05:00', profile requires at least 00:14:00",
    ):
        assert part in msg
    assert failures(out, "slurm.identity")


def test_job_missing_from_accounting_is_caught(campaign):
    sacct = campaign.sacct()
    job = json.loads((point(campaign, "20m-c1024", 4) / "receipt.json").read_text())["job_id"]
    del sacct.rows[job]
    bad = failures(audit(campaign, sacct), "slurm.accounted")
    assert len(bad) == 1
    assert bad[0].message == f"curves/20m-c1024/b4/attempt-1/receipt.json: job {job} is missing from Slurm accounting"


def test_wrong_account_and_partition_are_caught(campaign):
    sacct = campaign.sacct()
    sacct.rows = {j: msgspec.structs.replace(r, account="other", partition="debug") for j, r in sacct.rows.items()}
    bad = failures(audit(campaign, sacct), "slurm.allocation")
    assert len(bad) == 8
    assert "account 'other', profile requires 'throughput'; partition 'debug', profile requires 'gpu'" in bad[0].message


def test_local_campaign_reports_slurm_not_applicable(tmp_path):
    built = build_throughput(tmp_path / "tp", scheduler="local")
    sacct = built.sacct()
    out = audit(built, sacct)
    # Its scheduler's accounting is the local job registry, never sacct.
    assert failures(out) == [] and out.report.scheduler_accounting == "checked" and sacct.calls == []
    na = [c for c in out.report.checks if c.status == "not_applicable" and c.name == "slurm"]
    assert na and "local scheduler" in na[0].message


def test_audit_of_200_points_is_fast_and_batches_sacct(tmp_path):
    contexts = tuple(128 * 2**i for i in range(10))  # 2 models x 10 contexts x 10 batches = 200 points
    built = build_throughput(
        tmp_path / "big", models=("20m", "90m"), contexts=contexts, first_oom=512, max_concurrent=20
    )
    n = sum(len(p) for p in built.points.values())
    assert n == 200
    sacct = built.sacct()
    t0 = time.perf_counter()
    out = audit(built, sacct)
    write_outputs(built.root, out)
    elapsed = time.perf_counter() - t0
    assert failures(out) == []
    assert len(sacct.by_id()) == 2 and len(sacct.by_name()) == 2  # 200 jobs and 200 tokens, 100 per query
    assert elapsed < 10, elapsed


def test_sacct_parsing_keeps_pipes_in_comments():
    fields = [name for name, _ in FIELDS]
    line = "|".join(
        [
            "42",
            "tok",
            "COMPLETED",
            "0:0",
            "gpu",
            "acct",
            "00:14:00",
            "cpu=8",
            "64G",
            "2026-01-01T00:00:00",
            "2026-01-01T00:01:00",
            "00:01:00",
            "n1",
            "",
            "a|b",
        ]
    )
    (row,) = parse_rows(line + "\n")
    assert row.comment == "a|b" and row.job_id == "42" and len(fields) == 15
    assert row.node_list == "n1" and row.consumed_energy_raw == ""
    assert mem_mib("65536M") == mem_mib("64G")


def test_local_campaign_concurrency_comes_from_recorded_accounting(tmp_path):
    built = build_throughput(tmp_path / "tp", scheduler="local", max_concurrent=1)
    bad = failures(audit(built))
    assert [c.name for c in bad] == ["local.peak_concurrency"]
    assert bad[0].values["peak"] == 2 and bad[0].values["limit"] == 1


def test_peak_concurrency_of_short_sequential_jobs():
    def job(job_id, start, end):
        return JobAccounting(
            job_id=job_id,
            state="completed",
            start=f"2026-01-01T00:00:{start:02d}+00:00",
            end=f"2026-01-01T00:00:{end:02d}+00:00",
        )

    # Jobs that start and end within one second, one after another (schedulers record seconds).
    assert job_states.peak_concurrency([job("1", 33, 33), job("2", 34, 34), job("3", 35, 35)]).jobs == 1
    # One job ends the second the next starts: not concurrent.
    assert job_states.peak_concurrency([job("1", 10, 20), job("2", 20, 30)]).jobs == 1
    # A short job inside a long one, and one starting when a zero-length one ran.
    assert job_states.peak_concurrency([job("1", 10, 30), job("2", 15, 15), job("3", 15, 20)]).jobs == 3
    running = JobAccounting(job_id="4", state="running", start="2026-01-01T00:00:05+00:00")
    assert job_states.peak_concurrency([job("1", 10, 30), running]).jobs == 2
    # A time without its offset is not an instant: named, never counted.
    naive = JobAccounting(job_id="5", state="running", start="2026-01-01T00:00:05")
    assert job_states.peak_concurrency([naive]).unreadable == (
        "job 5: start '2026-01-01T00:00:05' is not a date and time",
    )


def _lose_job(campaign, folder, finished: str, end: str):
    """The worker finished its result at `finished`; the job ended NODE_FAIL at `end`,
    in the receipt and in sacct alike."""
    edit(folder / "result.json", lambda d: d.update(finished_at=finished))
    edit(folder / "receipt.json", lambda d: receipt_ended(d, "NODE_FAIL", "0:0", end=end))
    sacct = campaign.sacct()
    job = json.loads((folder / "receipt.json").read_text())["job_id"]
    sacct.rows[job] = msgspec.structs.replace(sacct.rows[job], state="NODE_FAIL", exit_code="0:0", end=end)
    return sacct


def test_job_lost_after_its_result_was_finished_is_accepted(campaign):
    """A node (or the local machine) lost while the job was finishing: the worker's ok result
    is whole and was finished before the job's end, so it stands, as the controller keeps it."""
    folder = point(campaign, "20m-c512", 4)
    out = audit(campaign, _lose_job(campaign, folder, "2026-11-29T21:32:42+00:00", "2026-11-29T21:33:20+00:00"))
    assert not failures(out)


@pytest.mark.parametrize("tz", ["Asia/Tokyo", "America/Los_Angeles"])
def test_lost_job_times_compare_as_instants_in_any_auditors_timezone(campaign, tz, monkeypatch):
    """The result's UTC time against an end written with another offset (the local
    scheduler writes its machine's), audited in a third timezone: 10 s apart either way."""
    monkeypatch.setenv("TZ", tz)
    time.tzset()
    try:
        folder = point(campaign, "20m-c512", 4)
        fine = audit(campaign, _lose_job(campaign, folder, "2026-11-29T21:33:20+00:00", "2026-11-30T06:33:30+09:00"))
        assert not failures(fine)
        late = audit(campaign, _lose_job(campaign, folder, "2026-11-29T21:33:40+00:00", "2026-11-30T06:33:30+09:00"))
        assert "node_fail ending after the result was finished" in failures(late, "slurm.state")[0].message
    finally:
        monkeypatch.undo()
        time.tzset()


def test_ok_result_finished_after_a_lost_job_is_caught(campaign):
    folder = point(campaign, "20m-c512", 4)
    out = audit(campaign, _lose_job(campaign, folder, "2026-11-29T21:33:20+00:00", "2026-11-29T21:32:42+00:00"))
    assert {"receipt.state", "slurm.state"} <= {c.name for c in failures(out)}
    assert "node_fail ending after the result was finished" in failures(out, "slurm.state")[0].message


# ------------------------------------------------------------- jobs without a receipt


def _token(campaign, curve: str, batch: int) -> str:
    return json.loads((point(campaign, curve, batch) / "intent.json").read_text())["token"]


def test_every_job_of_the_campaigns_tokens_has_a_receipt(campaign):
    sacct = campaign.sacct()
    out = audit(campaign, sacct)
    assert failures(out) == []
    (check,) = [c for c in out.report.checks if c.name == "slurm.unreceipted"]
    assert check.status == "pass"
    assert check.values == {"jobs": 8, "tokens": 8, "windows": 1, "queries": 1, "span_seconds": 86400}
    # The intents were written from 12:00:00 to 12:08:01 UTC, an hour's margin each side.
    assert check.message == (
        "sacct holds 8 jobs named by the campaign's 8 tokens, asked in 1 windows of at most 1-00:00:00 around the "
        "intents' times, with 1 sacct calls (2026-10-08T11:00:00+00:00 to 2026-10-08T13:08:01+00:00); each has a receipt"
    )
    (argv,) = sacct.by_name()
    assert argv[:3] == ["sacct", "-X", "--allusers"] and "--parsable2" in argv and "--noheader" in argv
    assert f"--format={FORMAT}" in argv
    # In UTC, as sacct reads it under the audit's TZ=UTC, whatever the auditor's zone.
    assert argv[-3:-1] == ["--starttime=2026-10-08T11:00:00", "--endtime=2026-10-08T13:08:01"]
    names = next(a for a in argv if a.startswith("--name=")).removeprefix("--name=").split(",")
    assert sorted(names) == sorted(_token(campaign, c, b) for c, pts in campaign.points.items() for b in pts)


def test_a_second_job_under_one_attempts_token_is_caught(campaign):
    sacct = campaign.sacct()
    token = _token(campaign, "20m-c512", 2)
    original = next(row for row in sacct.rows.values() if row.job_name == token)
    sacct.rows["4242"] = msgspec.structs.replace(
        original, job_id="4242", state="RUNNING", start="2026-10-08T12:05:00", end="Unknown"
    )
    out = audit(campaign, sacct)
    (bad,) = failures(out)
    assert bad.name == "slurm.unreceipted" and bad.file == "curves/20m-c512/b2/attempt-1/intent.json"
    assert bad.message == (
        f"curves/20m-c512/b2/attempt-1/intent.json: job 4242 ({token}) was submitted without a receipt in the campaign "
        f"(sacct: RUNNING, start 2026-10-08T12:05:00+00:00); the attempt's receipt names job {original.job_id}"
    )
    assert bad.values == {
        "job_id": "4242",
        "token": token,
        "state": "RUNNING",
        "attempt": "curves/20m-c512/b2/attempt-1",
    }
    write_outputs(campaign.root, out)
    accounting = (campaign.root / "accounting.txt").read_text()
    assert "# 1 jobs named by the campaign's tokens without a receipt (listed last)" in accounting
    assert accounting.rstrip().splitlines()[-1].startswith("4242|")


def test_a_job_left_by_a_crash_before_the_receipt_is_caught(campaign):
    """The controller died between sbatch and the receipt, and the intent was (wrongly)
    settled as never submitted: its job is in sacct, and no receipt names it."""
    folder = point(campaign, "20m-c1024", 4)
    job = json.loads((folder / "receipt.json").read_text())["job_id"]
    (folder / "receipt.json").unlink()
    (folder / "result.json").unlink()
    from throughput_schema import Settlement, write_atomic

    write_atomic(
        folder / "settlement.json",
        Settlement(
            token=_token(campaign, "20m-c1024", 4),
            state="never-submitted",
            reason="planted",
            decided_at="2026-10-08T12:10:00+00:00",
        ),
    )
    bad = failures(audit(campaign), "slurm.unreceipted")
    assert len(bad) == 1 and bad[0].values["job_id"] == job
    assert bad[0].message.endswith("; the attempt has no receipt and was settled as never-submitted")


def test_token_lookup_is_batched(tmp_path):
    contexts = tuple(128 * 2**i for i in range(10))  # 2 models x 10 contexts x 10 batches = 200 tokens
    built = build_throughput(
        tmp_path / "big", models=("20m", "90m"), contexts=contexts, first_oom=512, max_concurrent=20
    )
    sacct = built.sacct()
    out = audit(built, sacct)
    assert failures(out) == []
    by_name = sacct.by_name()
    sizes = [len(next(a for a in argv if a.startswith("--name=")).split(",")) for argv in by_name]
    assert sizes == [100, 100]
    one = query_windows.around("2026-10-07T12:00:00+00:00")
    rows, queries, windows = slurm.query_tokens({f"t{i}": one for i in range(250)}, runner=sacct)
    assert rows == {} and len(windows) == 1 and [len(q.argv[-1].split(",")) for q in queries] == [100, 100, 50]


def test_token_lookup_with_sacct_unavailable_is_one_line(campaign):
    calls = []

    def sacct(argv):
        calls.append(argv)
        if "-j" in argv:
            return campaign.sacct()(argv)
        raise FileNotFoundError("sacct")

    out = audit(campaign, sacct)
    bad = failures(out)
    assert [c.name for c in bad] == ["slurm.sacct"]
    assert bad[0].message.startswith(
        "Slurm accounting not available: sacct not found: the Slurm client tools are needed to audit a Slurm campaign; "
    )
    assert out.report.scheduler_accounting == "not_available"
    assert "# sacct by token failed: sacct not found" in out.accounting


def test_unreadable_intent_time_is_one_line_and_the_other_tokens_are_still_looked_up(campaign):
    intent = "curves/20m-c512/b2/attempt-1/intent.json"
    edit(campaign.root / intent, lambda d: d.update(created_at="yesterday"))
    sacct = campaign.sacct()
    out = audit(campaign, sacct)
    bad = failures(out, "slurm.unreceipted")
    assert [c.message for c in bad] == [
        f"{intent}: created_at 'yesterday' is not a time; jobs under its token cannot be looked up"
    ]
    (argv,) = sacct.by_name()
    assert len(next(a for a in argv if a.startswith("--name=")).split(",")) == 7
    assert not [c for c in out.report.checks if c.name == "slurm.unreceipted" and c.status == "pass"]
