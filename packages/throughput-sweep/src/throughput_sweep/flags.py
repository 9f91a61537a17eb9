"""The command line of `throughput-sweep`: its subcommands, their flags and the exit statuses."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import overload

from throughput_schema import Protocol
from throughput_schema.argparsing import (
    OneLineParser,
    add_optimizer_name,
    non_negative_int,
    positive_float,
    positive_int,
)
from throughput_schema.precision import GUIDE_PRECISION, PRECISIONS, unknown_precision, unmeasured_pairing
from throughput_sweep.campaign import CampaignError
from throughput_sweep.exit_statuses import EXIT_STATUSES

DESCRIPTION = "`throughput-sweep`: run, status, collect, reconcile and close-curve for batch-doubling campaigns."

PROG = "throughput-sweep"
POLL_MAX_ENV = "THROUGHPUT_SWEEP_POLL_MAX_SECONDS"
# The protocol's settings `run` takes as flags, each under its Protocol field's name.
PROTOCOL_FLAGS = ("warmup", "windows", "window_seconds", "precision")


def precision(text: str) -> str:
    refusal = unknown_precision(text, where="")
    if refusal is not None:
        raise argparse.ArgumentTypeError(refusal.strip())
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description=DESCRIPTION, epilog=EXIT_STATUSES)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    _add_run(sub)
    _add_others(sub)
    return parser


def _add_run(sub) -> None:
    run = sub.add_parser(
        "run", help="create or resume a campaign and watch it until every curve ends", epilog=EXIT_STATUSES
    )
    run.add_argument("--output", type=Path, required=True, help="the campaign folder")
    run.add_argument("--dry-run", action="store_true", help="print the plan and the first batch script; write nothing")
    run.add_argument("--resume", action="store_true", help="continue an existing campaign")
    run.add_argument(
        "--allow-slow-cpu",
        action="store_true",
        help="on a machine without a GPU, start even where a point is estimated to outlast its watchdog",
    )
    run.add_argument(
        "--retry-failed", action="store_true", help="with --resume: retry blocked points in fresh attempts"
    )
    run.add_argument(
        "--contexts", type=positive_int, nargs="+", metavar="L", help="context lengths (default 512 1024 2048 4096)"
    )
    run.add_argument(
        "--models",
        nargs="+",
        metavar="M",
        help="model presets under configs/, or a Hugging Face model's PATH/config.json (default 20m 90m 250m 500m)",
    )
    run.add_argument(
        "--profile",
        help="cluster profile: a name under configs/clusters/ or a YAML path (default: $THROUGHPUT_SWEEP_PROFILE; a follow-up takes its parent's; local where no cluster scheduler, such as sbatch, is found here)",
    )
    run.add_argument("--max-batch", type=positive_int, help="stop each curve at this batch: 'no OOM up to the cap'")
    run.add_argument(
        "--window-seconds",
        type=positive_float,
        help=f"seconds per measurement window (default {Protocol().window_seconds:g})",
    )
    run.add_argument(
        "--precision",
        type=precision,
        help=f"training precision: {', '.join(PRECISIONS)} (default {GUIDE_PRECISION}, the guide's; fp8-*: torchao's "
        "float8 linears, on GPUs with FP8 matrix units and the tiny-llm[fp8] extra in the compute environment)",
    )
    run.add_argument("--windows", type=positive_int, help=f"measurement windows (default {Protocol().windows})")
    run.add_argument("--warmup", type=non_negative_int, help=f"warm-up updates (default {Protocol().warmup})")
    add_optimizer_name(run, "every point trains with")
    run.add_argument(
        "--optimizer-timing-from",
        type=Path,
        metavar="DIR",
        help="remeasure a completed throughput campaign's fitting points with optimizer timing",
    )
    run.add_argument(
        "--parallel-optimizer-points",
        action="store_true",
        help="with --optimizer-timing-from: submit every inherited point independently",
    )
    run.add_argument(
        "--spot-check-from",
        type=Path,
        metavar="A",
        help="re-measure a seeded sample of a complete, audited throughput campaign's fitting points and compare them with it",
    )
    run.add_argument(
        "--points",
        type=positive_int,
        metavar="N",
        help="with --spot-check-from: how many points (each curve's recommended batch always among them)",
    )
    run.add_argument("--seed", type=int, default=0, help="with --spot-check-from: the sample's random seed (default 0)")
    run.add_argument("--worker", default="tiny_llm", help=argparse.SUPPRESS)
    # The longest wait between two polls (the scheduler's own by default). The tests set it in
    # the environment, so that the commands they run as a user would (the guide's, tools/h200.sh
    # e2e) notice a job's end within a second, changing no figure.
    run.add_argument(
        "--poll-max-seconds", type=positive_float, default=os.environ.get(POLL_MAX_ENV), help=argparse.SUPPRESS
    )
    # How long a job gone from squeue waits for Slurm's accounting before it is settled from its
    # files (the watcher's accounting_down_grace): the real-Slurm test of a purge while slurmdbd is down.
    run.add_argument("--accounting-grace-seconds", type=positive_float, default=None, help=argparse.SUPPRESS)
    run.add_argument("--no-preflight", action="store_true", help=argparse.SUPPRESS)  # tests of sbatch's own refusals
    run.add_argument("--no-progress", action="store_true", help="no progress line on stderr (for logs and scripts)")


def _add_others(sub) -> None:
    """The subcommands that read or settle an existing campaign."""
    status = sub.add_parser("status", help="where each curve stands: state, job ids, failures", epilog=EXIT_STATUSES)
    status.add_argument("--output", type=Path, required=True)
    status.add_argument(
        "--offline", action="store_true", help="from the campaign's files alone: do not ask the scheduler"
    )

    collect = sub.add_parser("collect", help="write README.md, results.csv/json and the figures")
    collect.add_argument("--output", type=Path, required=True)

    close = sub.add_parser("close-curve", help="end a blocked curve by a recorded decision (never a memory boundary)")
    close.add_argument("--output", type=Path, required=True)
    close.add_argument("curve", metavar="CURVE", help="the blocked curve, as status names it (e.g. 250m-c4096)")
    close.add_argument("--reason", required=True, help="why it ends here, in a line (kept in the record)")

    rec = sub.add_parser("reconcile", help="settle an ambiguous submission intent by hand")
    rec.add_argument("--output", type=Path, required=True)
    rec.add_argument("--token", required=True, help="the intent's token (shown by status)")
    group = rec.add_mutually_exclusive_group(required=True)
    group.add_argument("--job-id", help="adopt this scheduler job as the point's receipt")
    group.add_argument("--none", action="store_true", help="record that no job was submitted")


@overload
def protocol_from(args: argparse.Namespace, base: Protocol) -> Protocol: ...
@overload
def protocol_from(args: argparse.Namespace, base: None = None) -> Protocol | None: ...
def protocol_from(args: argparse.Namespace, base: Protocol | None = None) -> Protocol | None:
    """The protocol the run flags ask for: `base` with the flags given applied, or None where
    no base is given and no flag changes the guide's. FP8 with Muon is refused here."""
    import msgspec

    changes = {k: getattr(args, k) for k in PROTOCOL_FLAGS if getattr(args, k) is not None}
    if args.optimizer_name is not None:
        changes["optimizer"] = args.optimizer_name  # the Protocol's name for the recipe's optimizer.name
    if base is None and not changes:
        return None
    protocol = msgspec.structs.replace(base or Protocol(), **changes)
    refusal = unmeasured_pairing(protocol.precision, protocol.optimizer)
    if refusal is not None:
        raise CampaignError(refusal)
    return protocol
