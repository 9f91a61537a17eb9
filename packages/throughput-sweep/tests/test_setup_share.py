"""The campaign's setup share in status and collect's README: the jobs' startup and setup
against their elapsed time, the setup split into its phases, and the measured windows."""

from __future__ import annotations

import msgspec

from campaign_builder.complete import build_optimizer, build_throughput
from throughput_schema import WorkerResult, read, write_atomic
from throughput_sweep.campaign import open_campaign
from throughput_sweep.collect import collect
from throughput_sweep.status import render_status
from throughput_sweep.usage import setup_share

# The builder's campaign: eight jobs of 150 s with a result, six of them measured, each result
# 8 s of startup and 30 s of setup (4 + 6 + 14 + 4.5 + 1.5) and five 10 s windows.
LINE = (
    "Setup: 228 s of 1,200 s of job time (19%) over 8 job(s): startup 48 s, setup 180 s "
    "(build 24 s, trace 36 s, compile 84 s, first run 27 s, capture 9 s); measured windows 300 s (25%)"
)


def _infos(root):
    return [i for c in open_campaign(root).curves() for i in c.attempts]


def test_status_and_the_readme_give_the_setup_share_of_the_jobs_time(tmp_path):
    root = build_throughput(tmp_path / "tp", scheduler="local").root
    assert LINE in render_status(open_campaign(root)).splitlines()
    collect(open_campaign(root))
    assert f"{LINE}.\n" in (root / "README.md").read_text()


def test_an_optimizer_points_job_counts_both_of_its_workers(tmp_path):
    tp = build_throughput(tmp_path / "tp", scheduler="local")
    infos = _infos(build_optimizer(tmp_path / "opt", tp, scheduler="local").root)
    share = setup_share(infos)
    pairs = [(i.attempt.result, i.attempt.baseline) for i in infos if i.attempt.baseline and i.attempt.result]
    assert pairs and share.jobs == len([i for i in infos if i.attempt.receipt and i.attempt.result])
    assert share.setup == sum(r.setup_seconds + b.setup_seconds for r, b in pairs)
    assert share.startup == sum(r.startup_seconds + b.startup_seconds for r, b in pairs)


def test_results_without_a_split_still_count_their_setup(tmp_path):
    root = build_throughput(tmp_path / "tp", scheduler="local").root
    for path in root.glob("curves/*/b*/attempt-*/result.json"):
        write_atomic(path, msgspec.structs.replace(read(path, WorkerResult), setup_phases={}))
    line = setup_share(_infos(root)).line()
    assert line == LINE.replace(" (build 24 s, trace 36 s, compile 84 s, first run 27 s, capture 9 s)", "")


def test_the_line_counts_the_setups_that_loaded_a_saved_compile(tmp_path):
    from throughput_schema.compile_cache import CompileCache

    root = build_throughput(tmp_path / "tp", scheduler="local").root
    paths = sorted(root.glob("curves/*/b*/attempt-*/result.json"))
    for n, path in enumerate(paths):
        state = "warm" if n < 2 else "cold" if n < 5 else "off"
        cache = CompileCache(state=state)
        write_atomic(path, msgspec.structs.replace(read(path, WorkerResult), compile_cache=cache))
    share = setup_share(_infos(root))
    assert (share.cached, share.warm) == (5, 2)
    assert share.line() == f"{LINE}; 2 of 5 setups warm (loaded a saved compile)"


def test_results_that_recorded_no_startup_say_so_rather_than_zero(tmp_path):
    root = build_throughput(tmp_path / "tp", scheduler="local").root
    for path in root.glob("curves/*/b*/attempt-*/result.json"):
        write_atomic(path, msgspec.structs.replace(read(path, WorkerResult), startup_seconds=None))
    share = setup_share(_infos(root))
    assert share.startup is None and share.to_dict()["startup_seconds"] is None
    assert share.line().startswith(
        "Setup: 180 s of 1,200 s of job time (15%) over 8 job(s): startup not recorded, setup 180 s"
    )
