"""`throughput-sweep`'s subcommands, each over one campaign folder (their flags are in flags.py).

Bad input is one line on stderr and exit status 2, with nothing on disk changed.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from throughput_schema import Protocol, SchemaError
from throughput_schema.argparsing import command_line, storage_error, storage_reason
from throughput_schema.layout import JOB_SCRIPT, MANIFEST, SPOT_CHECK, attempt_dir
from throughput_schema.muon import optimizer_deviation
from throughput_schema.recipe import RecipeError
from throughput_schema.scheduler_names import UnknownScheduler
from throughput_sweep import cpu_estimate
from throughput_sweep.campaign import Campaign, CampaignError, find_repo_root, open_campaign
from throughput_sweep.exit_statuses import (
    EXIT_BLOCKED,
    EXIT_BUDGET,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_SPOT_CHECK_FAILED,
    EXIT_USAGE,
)
from throughput_sweep.flags import PROG, build_parser, protocol_from
from throughput_sweep.freezing import create
from throughput_sweep.frozen_profile import blocked_advice, resume_profile
from throughput_sweep.locking import CampaignLock
from throughput_sweep.planning import DEFAULT_CONTEXTS, DEFAULT_MODELS, check_resume, plan_optimizer, plan_throughput
from throughput_sweep.preflight import gate
from throughput_sweep.profiles import choose_profile, missing_python, parent_profile
from throughput_sweep.schedulers import BACKENDS, backend
from throughput_sweep.worst_case import worst_case

if TYPE_CHECKING:  # the watcher is imported only by the commands that watch
    from throughput_sweep.watcher_state import WatchOptions


@command_line
def main(argv: list[str] | None = None) -> int:
    os.umask(os.umask(0o022) | 0o022)  # campaign files: never writable by group or others
    args = build_parser().parse_args(argv)
    try:
        BACKENDS.check()
        return {
            "run": cmd_run,
            "status": cmd_status,
            "collect": cmd_collect,
            "reconcile": cmd_reconcile,
            "close-curve": cmd_close_curve,
        }[args.command](args)
    except (CampaignError, SchemaError, RecipeError, UnknownScheduler) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        raise  # the reader has gone: command_line ends quietly
    except OSError as exc:
        if storage_error(exc):
            raise  # command_line says it in its one line
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(f"{PROG}: {exc.strerror or exc}{where}", file=sys.stderr)
        return EXIT_USAGE


# ---------------------------------------------------------------------------- run


def cmd_run(args: argparse.Namespace) -> int:
    if args.retry_failed and not args.resume:
        raise CampaignError("--retry-failed works with --resume on an existing campaign")
    if args.parallel_optimizer_points and not args.optimizer_timing_from:
        raise CampaignError("--parallel-optimizer-points needs --optimizer-timing-from DIR")
    if args.spot_check_from or args.points is not None:
        from throughput_sweep.spot_check import check_options

        check_options(args, changed_protocol=protocol_from(args) is not None)
    output: Path = args.output
    exists = (output / MANIFEST).exists()
    if exists and not args.resume and not args.dry_run:
        raise CampaignError(f"{output}: a campaign already exists here; add --resume to continue it")
    if args.resume and not exists:
        raise CampaignError(f"{output}: no campaign to resume (no manifest.json); leave out --resume to create one")
    # Either a campaign to watch, or the exit status of a dry run or a refused preflight.
    campaign = _resumed(args, output) if exists else _created(args, output)
    return campaign if isinstance(campaign, int) else watch(campaign, args)


def _resumed(args: argparse.Namespace, output: Path) -> Campaign | int:
    campaign = open_campaign(output)
    check_resume(
        campaign,
        models=args.models,
        contexts=args.contexts,
        max_batch=args.max_batch,
        profile=args.profile,
        parent=args.optimizer_timing_from or args.spot_check_from,
        protocol=protocol_from(args, campaign.manifest.protocol),
    )
    campaign, replaced = resume_profile(campaign, args.profile, find_repo_root(), write=False)
    verdict = gate(campaign, dry_run=args.dry_run, skip=args.no_preflight) if replaced else None
    if args.dry_run or (verdict and verdict.exit_status):
        shown = print_plan(campaign, args) if args.dry_run else 0
        if verdict:
            verdict.print()
        return (verdict.exit_status if verdict else 0) or shown
    if replaced:  # the new profile passed the preflight: now it replaces the frozen one
        campaign, _ = resume_profile(open_campaign(output), args.profile, find_repo_root(), write=True)
        assert verdict is not None, "a replaced profile was gated above"
        verdict.print()
    args.retry_failed = args.retry_failed or replaced
    return campaign


def _created(args: argparse.Namespace, output: Path) -> Campaign | int:
    root = find_repo_root()
    profile = choose_profile(
        args.profile,
        root,
        inherited=parent_profile(args.optimizer_timing_from or args.spot_check_from),
        need_python=not args.dry_run,
    )
    plan = _plan(args, output, profile, root)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise CampaignError(f"{output}: already exists and is not a campaign; choose a new --output")
    above = next(p for p in output.absolute().parents if p.exists())
    if not above.is_dir():
        raise CampaignError(f"{output}: cannot be created, {above} is a file; choose a new --output")
    preview = plan.preview()
    verdict = gate(preview, dry_run=args.dry_run, skip=args.no_preflight)  # the profile against the cluster
    cpu_estimate.announce(preview, allow_slow=args.allow_slow_cpu, dry_run=args.dry_run)
    if args.dry_run or verdict.exit_status:
        shown = print_plan(preview, args) if args.dry_run else 0
        verdict.print()
        return verdict.exit_status or shown
    campaign = create(plan)
    verdict.print()
    print(f"[sweep] created campaign {output} ({campaign.manifest.kind})", file=sys.stderr)
    return campaign


def _plan(args: argparse.Namespace, output: Path, profile, root: Path):
    """The new campaign's plan: a spot check, an optimizer follow-up, or a throughput campaign."""
    if args.spot_check_from:
        from throughput_sweep.spot_check import plan_spot_check

        return plan_spot_check(
            output, parent_dir=args.spot_check_from, points=args.points, seed=args.seed, profile=profile, root=root
        )
    if args.optimizer_timing_from:
        return plan_optimizer(
            output,
            parent_dir=args.optimizer_timing_from,
            parallel=args.parallel_optimizer_points,
            protocol=protocol_from(args),
            profile=profile,
            worker=args.worker,
            root=root,
            models=args.models,
            contexts=args.contexts,
        )
    return plan_throughput(
        output,
        models=list(args.models or DEFAULT_MODELS),
        contexts=list(args.contexts or DEFAULT_CONTEXTS),
        protocol=protocol_from(args, Protocol()),
        profile=profile,
        max_batch=args.max_batch,
        worker=args.worker,
        root=root,
    )


def driver_name() -> str:
    """How the user started us, for the commands we print (resume, collect)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and (spec.name or "").startswith("throughput_sweep"):
        # `python -m throughput_sweep.cli` (no console script installed, e.g. a GPU image):
        # argv[0] is then the module's file, which is not how to run it again.
        return f"{shlex.quote(sys.executable)} -m {spec.name}"
    argv0 = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else PROG
    if argv0.endswith(".py"):
        return f"{shlex.quote(sys.executable)} {shlex.quote(sys.argv[0])}"
    return PROG


def watch_options(campaign: Campaign, args: argparse.Namespace) -> WatchOptions:
    """The watcher's options: the run's flags, and the waits its profile sets."""
    from throughput_sweep.watcher import WatchOptions, resume_command

    profile = campaign.manifest.profile
    options = WatchOptions(
        retry_failed=args.retry_failed,
        poll_max=args.poll_max_seconds or backend(profile.scheduler).poll_max_seconds,
        never_start_after=profile.never_start_seconds,
        accounting_grace=profile.accounting_grace_seconds,
        progress=not args.no_progress,
        resume_command=resume_command(campaign.root, driver_name()),
    )
    if args.accounting_grace_seconds is not None:
        options = dataclasses.replace(options, accounting_down_grace=args.accounting_grace_seconds)
    return options


def watch(campaign: Campaign, args: argparse.Namespace) -> int:
    import anyio

    from throughput_sweep.budget import budget_line, stopped_on
    from throughput_sweep.status import campaign_exit_status, exit_status, receipt_advice, render_status
    from throughput_sweep.watcher import Watcher

    profile = campaign.manifest.profile
    options = watch_options(campaign, args)
    with CampaignLock(campaign.root):
        scheduler = backend(profile.scheduler).for_campaign(profile, campaign.root)
        removed = scheduler.removed_environment()
        if removed:  # docs/reliability.md
            print(f"[sweep] kept from Slurm and its jobs: {', '.join(removed)}", file=sys.stderr)
        watcher = Watcher(campaign, scheduler, options)
        # A watcher stopped mid-query (a full disk) kills that query's process; asyncio may then
        # warn it could not reap it, a second line beside the one that says why the run stopped.
        logging.getLogger("asyncio").setLevel(logging.ERROR)
        try:
            try:
                code = anyio.run(watcher.run)
            except BaseExceptionGroup as group:  # a task of the watcher failed: report the cause itself
                raise _first_leaf(group) from None
        except OSError as exc:
            # Disk full, folder gone...: stop cleanly; every file is written atomically, so
            # --resume continues from what is on disk (submitted jobs keep running).
            where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
            why = f"{exc.strerror or exc}{where}"
            if storage_error(exc):
                why = f"{storage_reason(exc)}; nothing more is submitted"
            raise CampaignError(
                f"{campaign.root}: the watcher stopped: {why}; "
                f"submitted jobs keep running; fix it, then resume with: {options.resume_command}"
            ) from None
    if code == EXIT_INTERRUPTED:
        return code
    curves = campaign.curves()
    status = exit_status(curves)
    if campaign.manifest.spot_check is not None and status == 0:
        from throughput_sweep.spot_check import finish

        finish(campaign)  # before status, which shows its verdict
        status = campaign_exit_status(campaign, curves)
    print(render_status(campaign), end="")
    where = shlex.quote(str(campaign.root))
    if status == EXIT_BUDGET:
        print(f"[sweep] {budget_line(campaign, stopped_on(curves), driver_name())}", file=sys.stderr)
        return status
    if status == EXIT_BLOCKED:
        print(f"[sweep] {blocked_advice(campaign, curves, driver_name())}", file=sys.stderr)
        return status
    if status == EXIT_INCOMPLETE:  # the run ends with every curve ended: a job has no receipt
        print(f"[sweep] {receipt_advice(campaign, curves, driver_name())}", file=sys.stderr)
        return status
    if status == EXIT_SPOT_CHECK_FAILED:
        print(
            f"[sweep] the spot check FAILED: sampled points changed beyond the noise threshold; "
            f"see {campaign.root / SPOT_CHECK}/comparison.md; write its report with: {driver_name()} collect --output {where}",
            file=sys.stderr,
        )
        return status
    print(
        f"[sweep] every curve has ended; write the report with: {driver_name()} collect --output {where}",
        file=sys.stderr,
    )
    return status


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return leaf


def print_plan(campaign: Campaign, args: argparse.Namespace) -> int:
    from throughput_sweep.attempt import attempt_request, campaign_script
    from throughput_sweep.curves import derive, pick, retry_set

    m = campaign.manifest
    p = m.profile
    infos = campaign.infos() if (campaign.root / MANIFEST).exists() else []
    retry = retry_set(campaign.curves()) if args.retry_failed and infos else frozenset()
    curves = derive(m, infos, retry, campaign.closures() if infos else {})
    out = []
    out.append("Dry run: nothing is written or submitted.")
    out.append(f"campaign {campaign.root} ({m.kind}{', parallel points' if m.parallel_points else ''})")
    out.append(
        f"models: {' '.join(m.models)}; contexts: {' '.join(map(str, m.contexts))}; "
        + (
            f"max batch {m.max_batch}"
            if m.max_batch
            else "the parent's batches"
            if m.parent
            else "batches double from 1 until a CUDA OOM"
        )
    )
    for name, source in m.model_sources.items():
        out.append(f"model {name}: converted from {source.path} (sha256 {source.sha256[:16]}...)")
    if m.parent:
        s = m.spot_check
        out.append(
            f"parent campaign: {m.parent.path}" + (f"; spot check of {s.points} points, seed {s.seed}" if s else "")
        )
    out.append(
        f"profile {p.name}: scheduler {p.scheduler}, account {p.account or '-'}, partition {p.partition or '-'}, "
        f"{p.gpus_per_job} GPU, {p.cpus_per_task} CPUs, mem {p.mem or '-'}, time {p.time_limit_minutes} min, "
        f"watchdog {p.watchdog_minutes:g} min, at most {p.max_concurrent_jobs} jobs at once; python {p.python}"
    )
    if missing_python(p):
        out.append(f"note: the compute Python {p.python} does not exist yet; the run refuses until it does")
    pr = m.protocol
    out.append(
        f"protocol: warmup {pr.warmup}, {pr.windows} windows of {pr.window_seconds:g} s, seed {pr.seed}, lr {pr.lr:g}, "
        f"betas ({pr.beta1:g}, {pr.beta2:g}), eps {pr.eps:g}, weight decay {pr.weight_decay:g}, clip {pr.grad_clip:g}"
    )
    out.extend(filter(None, [optimizer_deviation(pr)]))
    out.append("curves:")
    for c in curves:
        planned = f" (inherited batches {' '.join(map(str, c.planned))})" if c.planned is not None else ""
        out.append(f"  {c.name:<16} {c.describe}{planned}")
    first = pick(curves, p.max_concurrent_jobs)
    out.append(
        f"would submit now: {len(first)} job(s)"
        + (": " + ", ".join(f"{n.curve} b{n.batch_size}" for n in first) if first else "")
    )
    out.append(worst_case(campaign, curves))
    if first:
        out.append(f"first batch script ({first[0].curve} batch {first[0].batch_size} attempt {first[0].attempt}):")
        out.append(campaign_script(campaign, attempt_request(campaign, first[0])).rstrip("\n"))
        n = first[0]
        folder = attempt_dir(campaign.root, n.model, n.context_length, n.batch_size, n.attempt)
        argv = backend(p.scheduler).submit_command(p, folder / JOB_SCRIPT, token="TOKEN", workdir=folder)
        if argv is not None:
            out.append(f"its {Path(argv[0]).name} command line (the token is drawn at submission):")
            out.append(shlex.join(argv))
    print("\n".join(out))
    return 0


# ------------------------------------------------------------ status, collect, reconcile


def cmd_status(args: argparse.Namespace) -> int:
    from throughput_sweep.live import ask
    from throughput_sweep.status import campaign_exit_status, render_status

    campaign = open_campaign(args.output)
    print(render_status(campaign, ask(campaign, driver_name(), offline=args.offline)), end="")
    return campaign_exit_status(campaign)


def cmd_collect(args: argparse.Namespace) -> int:
    from throughput_sweep.collect import collect, energy_note

    campaign = open_campaign(args.output)
    written = collect(campaign)
    for path in written:
        print(path)
    if energy_note(written):
        print(energy_note(written))
    return 0


def cmd_close_curve(args: argparse.Namespace) -> int:
    from throughput_sweep.closing import close_curve

    campaign = open_campaign(args.output)
    with CampaignLock(campaign.root):  # no watcher may change the curve meanwhile
        print(close_curve(campaign, args.curve, args.reason))
    return 0


def cmd_reconcile(args: argparse.Namespace) -> int:
    from throughput_sweep.submission import reconcile_by_hand

    campaign = open_campaign(args.output)
    if args.job_id is not None and not args.job_id.isdigit():
        raise CampaignError(f"--job-id {args.job_id!r}: expected a numeric job id")
    if not any(i.attempt.intent is not None and i.attempt.intent.token == args.token for i in campaign.infos()):
        raise CampaignError(f"--token {args.token}: no intent with this token in {campaign.root}")
    with CampaignLock(campaign.root):  # checked again under the lock
        print(reconcile_by_hand(campaign, args.token, None if args.none else args.job_id))
    return 0


if __name__ == "__main__":
    sys.exit(main())
