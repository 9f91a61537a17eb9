"""The exit statuses of `throughput-sweep`, so a script can tell a finished campaign from one
that needs a person without reading text. The constants, the help's epilog (`EXIT_STATUSES`)
and the guide's table (docs/guide.md, checked by tests/test_exit_statuses.py) come from here."""

from __future__ import annotations

EXIT_COMPLETE = 0
EXIT_USAGE = 2  # bad input: one line on stderr, nothing changed
EXIT_BLOCKED = 3
EXIT_INCOMPLETE = 4
EXIT_SPOT_CHECK_FAILED = 5
EXIT_BUDGET = 6
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT) to the watcher: the shell's 128 + 2

# What each status means for `run` and `status`, in the order the help lists them.
MEANINGS: tuple[tuple[int, str], ...] = (
    (EXIT_COMPLETE, "every curve ended with a result (bounded, capped or complete)"),
    (EXIT_USAGE, "bad input"),
    (
        EXIT_BLOCKED,
        "every curve has ended but at least one is blocked by a failure (investigate, then run "
        "--resume --retry-failed; refused for its profile: fix it, new --output)",
    ),
    (
        EXIT_INCOMPLETE,
        "jobs are still running or points are still to submit (status), or a job that ran has no "
        "receipt (run --resume looks it up again; reconcile records it)",
    ),
    (
        EXIT_SPOT_CHECK_FAILED,
        "a spot check ended and FAILED: a sampled point changed beyond the noise threshold, or its "
        "comparison cannot be read (see spot-check/comparison.md)",
    ),
    (
        EXIT_BUDGET,
        "stopped on the allocation budget (GrpTRESMins used up; no job left pending): ask for more, then run --resume",
    ),
    (EXIT_INTERRUPTED, "run was interrupted (jobs keep running; run --resume)"),
)

EXIT_STATUSES = "exit status of run and status: " + "; ".join(f"{code} {text}" for code, text in MEANINGS) + "."
