"""What every command line of the project shares: its argument parser and entry wrapper.

A usage error is one line on stderr and exit status 2, like every other message the
tools print for bad input: no usage block for a user to read through. Output cut short
by its reader (`throughput-sweep status | head`) ends the command quietly.
"""

from __future__ import annotations

import argparse
import errno
import functools
import math
import os
import sys
from typing import Protocol

# What a shell reports for a command ended by SIGPIPE (128 + 13).
BROKEN_PIPE_EXIT = 141
# A full filesystem, or a user's quota used up (a cluster's campaign folder usually has one).
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def positive_int(text: str) -> int:
    """An argparse `type=`: a whole number above zero, or a one-line usage error."""
    value = _whole_number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be positive")
    return value


def non_negative_int(text: str) -> int:
    """An argparse `type=`: a whole number, zero or above, or a one-line usage error."""
    value = _whole_number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must not be negative")
    return value


def positive_float(text: str) -> float:
    """An argparse `type=`: a finite number above zero, or a one-line usage error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return value


def add_optimizer_name(parser: argparse.ArgumentParser, what: str) -> None:
    """`--optimizer-name`, the optimizer `what` (the recipe's `optimizer.name`). Spelled out so
    that no abbreviation of an `--optimizer-...` flag reads it: a bare `--optimizer` is ambiguous."""
    from typing import get_args

    from throughput_schema.configs import OptimizerName

    choices = get_args(OptimizerName)
    parser.add_argument(
        "--optimizer-name",
        choices=choices,
        help=f"the optimizer {what}: {choices[0]} (the guide's), or muon (Muon on the hidden matrices, "
        "AdamW on the rest; it is flagged as differing from the guide)",
    )


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


class Main(Protocol):
    """A command's entry point: `main()` reads sys.argv, `main(argv)` the list given."""

    def __call__(self, argv: list[str] | None = None) -> int: ...


def storage_error(exc: BaseException) -> OSError | None:
    """The full disk or exceeded quota behind `exc` (also inside an exception group: the
    watcher's tasks), or None."""
    if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = storage_error(inner)
            if found is not None:
                return found
    return None


def storage_reason(exc: OSError) -> str:
    """'cannot write FILE: No space left on device (ENOSPC): its filesystem is full or over its quota'."""
    where = f"cannot write {exc.filename}" if exc.filename else "cannot write"
    code = errno.errorcode.get(exc.errno or 0, exc.errno)
    return f"{where}: {exc.strerror} ({code}): its filesystem is full or over its quota"


def storage_line(exc: OSError) -> str:
    return (
        f"{storage_reason(exc)}. Nothing already written is damaged (every file is written whole or not at all); "
        "free space, then run the same command again (a campaign: with --resume)"
    )


def _prog(main: Main) -> str:
    """The command's name from its package: throughput_audit.cli -> throughput-audit."""
    module = main.__module__
    if module == "__main__":  # python -m package.cli
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        module = spec.name if spec is not None else "command"
    return module.split(".")[0].replace("_", "-")


def command_line(main: Main) -> Main:
    """Wraps a command's `main(argv)`: a reader that closed the pipe is not a traceback, nor is
    a full disk or quota (one line, exit status 2)."""

    @functools.wraps(main)
    def run(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except BrokenPipeError:
            # Python's own advice: point stdout at devnull so the flush at exit stays quiet.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return BROKEN_PIPE_EXIT
        except (OSError, BaseExceptionGroup) as exc:
            full = storage_error(exc)
            if full is None:
                raise
            print(f"{_prog(main)}: {storage_line(full)}", file=sys.stderr)
            return 2

    return run
