"""Repository-wide pytest fixtures (collected for tests/ and packages/*/tests), and the
shared test helpers of tests/ (campaign_builder, campaign_helpers, scripted_worker)
importable from every package's tests."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO_ROOT / "tests"))
pytest_plugins = ["isolated_members"]  # --isolated-members (tests/isolated_members.py)

# The test machine has Slurm installed, where a campaign without a profile is refused
# rather than run locally; tests that mean the local scheduler say so once, here. The
# tests of that refusal remove it (test_profiles.py, test_quickstart.py).
os.environ.setdefault("THROUGHPUT_SWEEP_PROFILE", "local")
# Every campaign a test runs, through whatever script, notices its jobs' ends within a second
# (flags.POLL_MAX_ENV; a test's own --poll-max-seconds still decides): the local scheduler's
# 5 s between polls adds seconds to each point of a campaign run one point after another.
os.environ.setdefault("THROUGHPUT_SWEEP_POLL_MAX_SECONDS", "1")
# torch's OpenMP threads sleep while they wait for work instead of spinning: the suite runs
# many torch processes side by side on two cores, where spinning threads burn the cores the
# others wait for (the quick start beside four busy loops: 303 s and 290 CPU-seconds spinning,
# 152 s and 139 CPU-seconds sleeping). Set before any test imports torch, and inherited by
# every process a test starts, Slurm's jobs included; no test compares figures across it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
LOCAL_SLURM_SCRIPT = REPO_ROOT / "tools" / "local-slurm.sh"
LOCAL_SLURM_PROFILE = REPO_ROOT / "configs" / "clusters" / "local-slurm.yaml"
# Which Slurm the `slurm` tests use: LOCAL_SLURM_VERSION, as tools/local-slurm.sh reads it
# (24.11 runs from a Debian 13 root, tools/local-slurm-root.sh). On 24.11 only the tests
# marked `slurm2411` (the production path) run; the other Slurm tests skip, saying so.
SLURM_VERSIONS = ("22.05", "24.11")
SLURM_VERSION = os.environ.get("LOCAL_SLURM_VERSION", "22.05")


def pytest_configure(config):
    if SLURM_VERSION not in SLURM_VERSIONS:
        raise pytest.UsageError(f"LOCAL_SLURM_VERSION={SLURM_VERSION}: use one of {', '.join(SLURM_VERSIONS)}")


# --- The suite side by side (pytest-xdist), every test still run once.
#
# `uv run pytest` runs on WORKERS worker processes, grouped as below, unless -n is given (-n 0 or
# -p no:xdist: one process, as before; a member's own environment has no xdist). What may not overlap is kept apart by file locks that
# every test takes for its whole run (setup, call, teardown), whatever runs it: a worker, a
# single process, or another pytest beside it (CI runs the Slurm 24.11 pass beside this one):
# - the Slurm lock of its LOCAL_SLURM_VERSION: shared by the Slurm tests (marker `slurm`, or
#   the fixture `local_slurm`), exclusive for those marked `slurm_exclusive` (they stop
#   daemons, drain the node, change limits or the config, or count the node's jobs);
# - the `alone` lock: shared by every test, exclusive for those marked `alone`.
# flock(2) grants a shared lock while an exclusive one waits, so an exclusive test runs once no
# test of its kind is running: in practice after the shared ones. A test takes the `alone` lock
# first, then the Slurm lock, and holds no other while it waits, so no two can wait on each
# other. A pytest started inside a test (the environment variable below) takes none and runs
# in one process: the test that started it holds them.
# Scheduling (xdist_group, added below): the exclusive Slurm tests in one group, the shared
# ones of a file together, the files spread over SHARED_SLURM_GROUPS groups; each group runs
# on one worker, so at most that many shared Slurm tests run at once on the node.
WORKERS = 6
SHARED_SLURM_GROUPS = 3
INSIDE_A_TEST = "THROUGHPUT_TESTS_INSIDE_A_TEST"
LOCK_DIR = Path("/tmp")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """`pytest` without -n runs on WORKERS workers, grouped (before xdist reads its options)."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    if os.environ.get(INSIDE_A_TEST) or config.getoption("usepdb", False) or config.getoption("collectonly"):
        return
    if config.option.numprocesses is None:
        # GPU tests (`-m cuda`) share one GPU: side by side they would run each other out of memory.
        config.option.numprocesses = 0 if "cuda" in (config.option.markexpr or "") else WORKERS
    if config.option.numprocesses and config.option.dist == "no":
        config.option.dist = "loadgroup"
        # In the order conftest.py sorts them (_start_long_work_first), not xdist's (most tests first).
        config.option.loadscopereorder = False


def _groups_file() -> Path:
    """Where a worker tells the scheduler each test's group (in this session's controller)."""
    return LOCK_DIR / f"throughput-sweeps-tests-groups-{os.getpid()}.json"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    if node.config.getoption("dist") == "loadgroup":
        node.workerinput["throughput_groups"] = str(_groups_file())


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's loadgroup, with the groups read from the workers' collection. (xdist 3.8 names a
    test's group in its id, which pytest 9.2's ids no longer take: every test would be its own group.)"""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class Grouped(LoadGroupScheduling):
        groups: dict[str, str] | None = None

        def schedule(self) -> None:
            if self.groups is None and self.collection_is_completed:
                path = _groups_file()
                self.groups = json.loads(path.read_text()) if path.exists() else {}
                path.unlink(missing_ok=True)
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            return (self.groups or {}).get(nodeid) or super()._split_scope(nodeid)

    return Grouped(config, log)


@pytest.hookimpl(tryfirst=True)  # before the worker tells the controller it has collected
def pytest_collection_finish(session):
    where = getattr(session.config, "workerinput", {}).get("throughput_groups")
    if where is None or session.config.workerinput.get("workerid") != "gw0":
        return
    groups = {}
    for item in session.items:
        mark = item.get_closest_marker("xdist_group")
        if mark is not None:
            groups[item.nodeid] = mark.kwargs["name"]
    Path(where + ".tmp").write_text(json.dumps(groups))
    os.replace(where + ".tmp", where)


def _is_slurm(item) -> bool:
    return item.get_closest_marker("slurm") is not None or "local_slurm" in getattr(item, "fixturenames", ())


def _skipped(item) -> bool:
    return item.get_closest_marker("skip") is not None


def _weight(item) -> int:
    """A rough guess of a test's seconds, to spread the Slurm files over the groups."""
    return 40 if item.get_closest_marker("slow") else 12


def _shares_fixtures_beyond_a_test(item) -> bool:
    """A test of a module whose fixtures (module, class or package scope) its other tests share."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d and d[-1].scope in ("module", "class", "package") for d in defs)


def _add_xdist_groups(items) -> None:
    exclusive = pytest.mark.xdist_group(name=f"slurm-{SLURM_VERSION}-exclusive")
    files: dict[str, list] = {}
    for item in items:
        if _skipped(item):
            continue
        if _is_slurm(item) and item.get_closest_marker("slurm_exclusive"):
            item.add_marker(exclusive)
        elif _is_slurm(item):
            files.setdefault(item.nodeid.split("::")[0], []).append(item)
        elif _shares_fixtures_beyond_a_test(item):
            item.add_marker(pytest.mark.xdist_group(name=item.nodeid.split("::")[0]))
    load = [0] * SHARED_SLURM_GROUPS
    for name in sorted(files, key=lambda f: (-sum(map(_weight, files[f])), f)):
        group = load.index(min(load))
        load[group] += sum(map(_weight, files[name]))
        for item in files[name]:
            item.add_marker(pytest.mark.xdist_group(name=f"slurm-{SLURM_VERSION}-shared-{group + 1}"))


@pytest.hookimpl(tryfirst=True)  # the groups before any other plugin reads the marks
def pytest_collection_modifyitems(config, items):
    if SLURM_VERSION != "22.05":
        skip = pytest.mark.skip(reason=f"not marked slurm2411: runs on Slurm 22.05 only, not {SLURM_VERSION}")
        for item in items:
            if item.get_closest_marker("slurm") and not item.get_closest_marker("slurm2411"):
                item.add_marker(skip)
    if config.pluginmanager.hasplugin("xdist"):
        _add_xdist_groups(items)
    _start_long_work_first(items)


# The longest single tests, measured on the 2-core machine (the quick start 11 min, tiny-llm's
# isolated run 14 min, an end-to-end script 4 min, beside the rest): started right after the
# Slurm groups, so that none of them starts late and runs on alone at the end.
LONGEST_FILES = ("tests/test_quickstart.py", "tests/test_members_isolated.py", "tests/test_e2e_script.py")


def _start_long_work_first(items) -> None:
    """Whole files in order, the longest work first: the Slurm tests (their groups are the
    longest chains, mostly waiting on Slurm), then LONGEST_FILES, then the files with whole
    campaigns and scripts, then the rest. Sorted by file and stably, so a module's tests stay
    together for its shared fixtures."""
    rank: dict[str, tuple[int, int]] = {}
    for item in items:
        file = item.nodeid.split("::")[0]
        if _is_slurm(item):
            kind = (0, 0)
        elif file in LONGEST_FILES:
            kind = (1, LONGEST_FILES.index(file))
        else:
            kind = (2 if item.get_closest_marker("slow") else 3, 0)
        rank[file] = min(kind, rank.get(file, kind))
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])


@contextlib.contextmanager
def _flocked(name: str, exclusive: bool) -> Iterator[None]:
    fd = os.open(LOCK_DIR / f"throughput-sweeps-tests-{name}.lock", os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases the lock


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outside pytest-timeout's timer: waiting is not running
def pytest_runtest_protocol(item, nextitem):
    if os.environ.get(INSIDE_A_TEST) or _skipped(item):
        yield
        return
    with contextlib.ExitStack() as held:
        held.enter_context(_flocked("alone", exclusive=item.get_closest_marker("alone") is not None))
        if _is_slurm(item):
            exclusive = item.get_closest_marker("slurm_exclusive") is not None
            held.enter_context(_flocked(f"slurm-{SLURM_VERSION}", exclusive))
        os.environ[INSIDE_A_TEST] = "1"
        try:
            yield
        finally:
            del os.environ[INSIDE_A_TEST]


@dataclasses.dataclass(frozen=True)
class LocalSlurm:
    """The single-node Slurm of tools/local-slurm.sh, as the tests see it."""

    version: str
    account: str
    partition: str
    state_dir: Path
    slurm_conf: Path
    profile_path: Path


def _run_script(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LOCAL_SLURM_SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _local_slurm_problem() -> str | None:
    """None when the local Slurm (of SLURM_VERSION) answers, starting it once if needed, else why not."""
    try:
        if _run_script("status", timeout=60).returncode == 0:
            return None
        started = _run_script("start", timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"tools/local-slurm.sh could not run: {exc}"
    if started.returncode != 0:
        tail = (started.stderr or started.stdout).strip()[-2000:]
        return f"tools/local-slurm.sh start failed (exit {started.returncode}):\n{tail}"
    if _run_script("status", timeout=60).returncode != 0:
        return "tools/local-slurm.sh started, but status still fails"
    return None


def _script_env() -> dict[str, str]:
    """The environment after `eval "$(tools/local-slurm.sh env)"` (SLURM_CONF; on 24.11 also PATH)."""
    shown = subprocess.run(
        ["bash", "-c", 'eval "$("$0" env)" && env -0', str(LOCAL_SLURM_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return dict(entry.split("=", 1) for entry in shown.split("\0") if "=" in entry)


@pytest.fixture(scope="session")
def local_slurm():
    """A running local Slurm of LOCAL_SLURM_VERSION; skips without one, fails instead when
    REQUIRE_SLURM=1. Its clients (sbatch, squeue, sacct...) come first on PATH for the session."""
    problem = _local_slurm_problem()
    if problem is not None:
        if os.environ.get("REQUIRE_SLURM") == "1":
            pytest.fail(f"REQUIRE_SLURM=1 but local Slurm {SLURM_VERSION} is unavailable: {problem}", pytrace=False)
        pytest.skip(f"local Slurm {SLURM_VERSION} unavailable: {problem}")

    env = _script_env()
    import yaml  # only the Slurm fixture needs it, and not every member declares pyyaml

    profile = yaml.safe_load(LOCAL_SLURM_PROFILE.read_text())
    slurm_conf = env["SLURM_CONF"]
    state_dir = env["LOCAL_SLURM_2411_DIR" if SLURM_VERSION == "24.11" else "LOCAL_SLURM_DIR"]

    saved = {k: os.environ.get(k) for k in ("SLURM_CONF", "PATH")}
    os.environ["SLURM_CONF"] = slurm_conf
    os.environ["PATH"] = env["PATH"]
    try:
        yield LocalSlurm(
            version=SLURM_VERSION,
            account=profile["account"],
            partition=profile["partition"],
            state_dir=Path(state_dir),
            slurm_conf=Path(slurm_conf),
            profile_path=LOCAL_SLURM_PROFILE,
        )
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
