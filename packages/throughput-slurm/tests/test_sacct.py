"""The one sacct text layer of the sweep and the audit: fields, rows, durations, windows."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from throughput_slurm.sacct import (
    FIELDS,
    FORMAT,
    AccountingRow,
    format_rows,
    parse_rows,
    parse_tres,
    rows_by_job,
    slurm_minutes,
    tres_gpus,
    windows,
)

ROW = (
    "7|tok|COMPLETED|0:0|gpu|throughput|00:14:00|billing=8,cpu=8,gres/gpu=1,mem=64G,node=1|64G|"
    "2026-01-01T00:00:00|2026-01-01T00:00:02|00:00:02|node1|5310|a|b|c"
)


def test_every_row_field_is_asked_once():
    assert sorted(attr for _, attr in FIELDS) == sorted(AccountingRow.__struct_fields__)
    assert FORMAT.split(",")[-1] == "Comment"  # free text, so last


def test_a_comment_with_bars_is_kept_whole_and_times_get_their_offset():
    (row,) = parse_rows(ROW + "\n\n")
    assert row.comment == "a|b|c" and row.node_list == "node1" and row.consumed_energy_raw == "5310"
    assert row.start == "2026-01-01T00:00:00+00:00" and row.end == "2026-01-01T00:00:02+00:00"


def test_rows_by_job_skips_steps_and_keeps_a_requeued_jobs_last_row():
    step = "7.batch|batch|COMPLETED|0:0||throughput||cpu=8|||||||node1|5310|"
    requeued = ROW.replace("|COMPLETED|", "|NODE_FAIL|", 1)
    rows = rows_by_job("\n".join([requeued, ROW, step]) + "\n")
    assert list(rows) == ["7"] and rows["7"].state == "COMPLETED" and rows["7"].comment == "a|b|c"
    assert [r.job_id for r in parse_rows(step)] == ["7.batch"]


def test_a_short_row_keeps_its_fields_and_the_rest_empty():
    (row,) = parse_rows("8|tok|FAILED\n")
    assert (row.job_id, row.state, row.exit_code, row.comment) == ("8", "FAILED", "", "")


def test_formatted_rows_read_back_the_same():
    rows = parse_rows(ROW + "\n" + ROW.replace("7|tok", "9|tok2", 1) + "\n")
    text = format_rows(rows)
    assert text.splitlines()[0] == FORMAT.replace(",", "|")
    assert parse_rows("".join(line + "\n" for line in text.splitlines()[1:])) == rows


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("00:14:00", 14), ("14:00", 14), ("1-00:00:00", 1440), ("2-03:04:30", 2 * 1440 + 184.5), (" 00:00:02 ", 2 / 60)],
)
def test_slurm_durations(text, minutes):
    assert slurm_minutes(text) == pytest.approx(minutes)


@pytest.mark.parametrize("text", ["", "UNLIMITED", "Partition_Limit", "INVALID"])
def test_no_limit_is_none(text):
    assert slurm_minutes(text) is None


@pytest.mark.parametrize("text", ["14", "1-00", "soon", "00:14:00x", "1.5:00"])
def test_an_unreadable_duration_raises_naming_the_text(text):
    with pytest.raises(ValueError, match=repr(text)):
        slurm_minutes(text)


def test_one_long_interval_is_cut_into_consecutive_windows_no_wider_than_the_span():
    now, day = datetime(2026, 12, 10, 12), timedelta(days=1)
    (short,) = windows([(now - timedelta(hours=2), now)], day)
    assert (short.start, short.end) == (now - timedelta(hours=2), now)
    found = windows([(now - timedelta(days=30, hours=1), now)], day)
    assert len(found) == 31 and found[-1].end == now
    assert all(w.end - w.start == day for w in found[:-1])
    assert all(a.end == b.start for a, b in zip(found, found[1:]))  # consecutive, no gap
    assert now - found[-1].start <= day


def test_a_window_reaching_the_present_ends_at_sacct_now():
    (w,) = windows([(datetime(2026, 12, 10, 10), datetime(2026, 12, 10, 12))], timedelta(days=1))
    assert w.sacct_args()[1].startswith("--endtime=2026-12-10T")
    assert w.sacct_args(until_now=True)[1] == "--endtime=now"


@pytest.mark.parametrize(
    ("tres", "gpus"),
    [
        ("billing=8,cpu=8,gres/gpu=1,mem=64G,node=1", 1),
        # a site tracking the type as well (AccountingStorageTRES=gres/gpu,gres/gpu:h100)
        ("cpu=8,gres/gpu=2,gres/gpu:h100=2,mem=64G", 2),
        # a site tracking only typed GPUs: each type counts
        ("cpu=8,gres/gpu:h100=1,mem=64G,node=1", 1),
        ("cpu=16,gres/gpu:a100=1,gres/gpu:h100=2", 3),
        ("cpu=8,mem=64G,node=1", None),  # no GPU named: not known, never 0
        ("", None),
        ("cpu=8,gres/gpu=,node=1", None),
    ],
)
def test_the_gpus_of_a_tres_list_untyped_or_typed(tres, gpus):
    assert tres_gpus(parse_tres(tres)) == gpus


def test_a_tres_list_is_read_as_its_pairs():
    assert parse_tres("cpu=8, gres/gpu:h100=1,junk,mem=64G") == {"cpu": "8", "gres/gpu:h100": "1", "mem": "64G"}
