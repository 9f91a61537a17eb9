"""The `--isolated-members` option (a pytest plugin that the root conftest.py loads).

The workspace's one environment hides a member importing what only a sibling declares. With
the option, each member's tests run once, in that member's own environment (`uv run --isolated
--package`), as one test of tests/test_members_isolated.py, beside the rest of the suite; the
workspace run then collects no member's tests, so no test runs twice. Without it, the members'
tests run in the workspace's environment and the isolated ones are deselected."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPTION = "--isolated-members"
MEMBERS_TEST = "tests/test_members_isolated.py"
# What a member's run said at its end, carried from the worker that ran it to the summary.
SUMMARY_KEY = "member_summary"


# Seconds each member's tests took alone on two idle cores (2026-12-06), only to start the
# longest first: the suite ends no sooner than its longest item, so it must not start last.
SECONDS_ALONE = {"tiny-llm": 468, "throughput-sweep": 210, "throughput-report": 126, "throughput-compare": 31}


def members() -> list[str]:
    """The members with tests, the longest first."""
    names = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "tests").is_dir())
    return sorted(names, key=lambda name: -SECONDS_ALONE.get(name, 0))


def pytest_addoption(parser):
    parser.addoption(
        OPTION,
        action="store_true",
        help="run each workspace member's tests in that member's own environment (uv run --isolated "
        "--package), beside the rest of the suite, instead of in the workspace's (.ci/run does)",
    )


def isolated(config) -> bool:
    return bool(config.getoption("isolated_members", default=False))


def pytest_ignore_collect(collection_path: Path, config):
    if not isolated(config):
        return None
    try:
        parts = collection_path.resolve().relative_to(ROOT / "packages").parts
    except ValueError:
        return None
    return True if len(parts) >= 2 and parts[1] == "tests" else None


def pytest_collection_modifyitems(config, items):
    if isolated(config):
        return
    apart = [item for item in items if item.nodeid.startswith(MEMBERS_TEST)]
    if apart:
        config.hook.pytest_deselected(items=apart)
        items[:] = [item for item in items if not item.nodeid.startswith(MEMBERS_TEST)]


_summaries: list[str] = []


def pytest_runtest_logreport(report):
    for key, value in report.user_properties:
        if key == SUMMARY_KEY and report.when == "call":
            _summaries.append(value)


def pytest_terminal_summary(terminalreporter):
    if _summaries:
        terminalreporter.section("each member's tests in its own environment")
        for line in sorted(_summaries):
            terminalreporter.write_line(line)
