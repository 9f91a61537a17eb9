"""The login-side watcher: an anyio program that submits and polls concurrently.

Two tasks share the campaign folder as their only state: the submitter derives the
curves from the files and submits ready points while fewer than `scheduler.slots` jobs
are out; the poller asks the scheduler about every job without final accounting (one
`poll` per cycle, its interval growing to a cap while nothing changes), writes the
result of a job that ended without one, and adds the final accounting to receipts.
Ctrl-C leaves submitted jobs running and prints the resume command.
"""

from __future__ import annotations

import shlex
import signal
import sys
import time
from pathlib import Path

import anyio
import anyio.to_thread

from throughput_sweep import budget, ended_early, late_results
from throughput_sweep.attempt import submit_attempt
from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.campaign import Campaign
from throughput_sweep.cluster_limits import SlotLimit, never_starts_now, refuse, settle_vanished
from throughput_sweep.curves import Curve, derive, pick, retry_set
from throughput_sweep.exit_statuses import EXIT_INTERRUPTED
from throughput_sweep.progress import progress_line, show
from throughput_sweep.schedulers.base import QueryFailed, Scheduler
from throughput_sweep.submission import late_intent, record_accounting, settle_intents
from throughput_sweep.watcher_state import WatcherState, WatchOptions


def jobs_out(infos: list[AttemptInfo], finished: dict[str, str]) -> int:
    """Jobs that may occupy a slot: unsettled intents and receipts not known to have ended."""
    out = 0
    for info in infos:
        if info.status == "unsettled":
            out += 1
            continue
        receipt = info.attempt.receipt
        if receipt is None:
            continue
        if receipt.job_id in finished or receipt.accounting is not None:
            continue  # a receipt is given its accounting once the job has ended
        if receipt.accounting_missing and info.attempt.result is not None:
            continue  # settled without Slurm's accounting (`cluster_limits.settle_vanished`)
        out += 1
    return out


def to_poll(infos: list[AttemptInfo], st: WatcherState) -> list[AttemptInfo]:
    return [
        i
        for i in infos
        if i.attempt.receipt is not None
        and not i.attempt.receipt.accounting_final
        and i.attempt.receipt.job_id not in st.accounting_given_up
    ]


class Watcher:
    def __init__(self, campaign: Campaign, scheduler: Scheduler, options: WatchOptions) -> None:
        self.campaign = campaign
        self.scheduler = scheduler
        self.options = options
        self.retry: frozenset[Path] = frozenset()  # set by startup(), once the recorded jobs are known
        self.out_at_start: frozenset[Path] = frozenset()  # attempts out when this run began (--retry-failed)
        self.st = WatcherState()
        self.slots = getattr(scheduler, "slots", campaign.manifest.profile.max_concurrent_jobs)
        self.limit = SlotLimit(allowed=self.slots, slots=self.slots, probe_every=options.limit_probe)

    # ----------------------------------------------------------------- main

    async def run(self) -> int:
        """0 when every curve has ended (bounded, capped, complete or blocked), EXIT_INTERRUPTED on Ctrl-C."""
        await self.startup()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._signals, tg.cancel_scope)
            tg.start_soon(self._poller)
            await self._submitter()
            tg.cancel_scope.cancel()
        return EXIT_INTERRUPTED if self.st.interrupted else 0

    async def startup(self) -> None:
        """Before anything is submitted: learn every recorded job's state, settle every intent."""
        infos = await self.infos()
        if self.options.retry_failed:
            self.out_at_start = frozenset(i.attempt.path for i in infos if i.status in ("submitted", "unsettled"))
        await self._poll_once(infos)
        for attempt in range(self.options.settle_attempts):
            infos = await self.infos()
            give_up = attempt == self.options.settle_attempts - 1
            _, error = await settle_intents(self.campaign, self.scheduler, infos, give_up=give_up, say_late=self.say)
            if not error:
                break
            self.say(f"cannot settle submission intents yet ({error}); retrying")
            await anyio.sleep(min(self.options.poll_max, 2.0 * 2**attempt))
        await self._poll_once(await self.infos())
        if self.options.retry_failed:
            # After the polls: a job found lost on resume (NODE_FAIL after the machine went
            # away) is one of the failures the user asked to retry, not a later one.
            self.retry = retry_set(await anyio.to_thread.run_sync(self.campaign.curves))
        # A campaign stopped on its budget goes on when resumed (budget.py).
        self.retry |= budget.budget_retry(await anyio.to_thread.run_sync(self.campaign.curves))

    async def infos(self) -> list[AttemptInfo]:
        """Every attempt's files, read in a worker thread: a campaign of hundreds of points on a
        shared file system must not stall the event loop (signals, the other task)."""
        return await anyio.to_thread.run_sync(self.campaign.infos)

    async def curves(self) -> tuple[list[AttemptInfo], list[Curve]]:
        infos = await self.infos()
        # A job out at the start that this run never saw out ended while no watcher ran, however late
        # the run learns it failed (no answer from the scheduler at startup): --retry-failed retries it.
        # (`derive` retries only those that failed.)
        gone = self.out_at_start - {i.attempt.path for i in infos if i.job_id in self.st.seen_out}
        retry = self.retry | gone | ended_early.early_retry(infos)
        return infos, derive(self.campaign.manifest, infos, retry, self.campaign.closures())

    def finished_all(self, infos: list[AttemptInfo], curves: list[Curve]) -> bool:
        if any(not c.done for c in curves):
            return False
        if any(i.status == "unsettled" for i in infos):
            return False
        if any(late_intent(i) and self.st.late_lookups[i.attempt.path] < self.options.settle_attempts for i in infos):
            return False
        return not to_poll(infos, self.st)

    # ------------------------------------------------------------ submitter

    async def _submitter(self) -> None:
        backoff = 0.0
        while True:
            # A fresh event before reading the files: a wake-up sent while this round reads
            # and submits is not lost (the wait below returns at once and the files are read again).
            self.st.wake_submitter = anyio.Event()
            infos, curves = await self.curves()
            self._progress(infos, curves)
            stopped = self.st.budget and not jobs_out(infos, self.st.finished) and not to_poll(infos, self.st)
            if self.finished_all(infos, curves) or stopped:
                self.st.done = True
                self.st.wake_poller.set()
                return
            self.slots = self.limit.probe(time.monotonic())
            out = jobs_out(infos, self.st.finished)
            submitted = 0
            for point in pick(curves, 0 if self.st.budget else self.slots - out):
                with anyio.CancelScope(shield=True):
                    async with self.st.lock:
                        outcome = await submit_attempt(self.campaign, self.scheduler, point)
                if outcome.job_id:
                    submitted += 1
                    backoff = 0.0
                    continue
                self.st.submit_error = outcome.error
                if outcome.limit:
                    self.slots = self.limit.lower(out + submitted, time.monotonic())
                    if not self.limit.said:
                        self.limit.said = True
                        self.say(
                            f"the cluster refused a job for a submit limit with {out + submitted} of ours "
                            f"queued; submitting at most {self.slots} at once, raising that again later "
                            f"({outcome.error})"
                        )
                else:
                    self.say(f"submission of {point.curve} batch {point.batch_size} failed: {outcome.error}")
                if outcome.retry_later:
                    backoff = min(self.options.submit_backoff_max, max(2.0, backoff * 2))
                break
            if submitted:
                self.st.wake_poller.set()
            with anyio.move_on_after(backoff or self.options.poll_max):
                await self.st.wake_submitter.wait()
            if backoff:
                await anyio.sleep(0)  # let the poller settle the failed intent first

    # --------------------------------------------------------------- poller

    async def _poller(self) -> None:
        interval = self.options.poll_min
        while not self.st.done:
            self.st.wake_poller = anyio.Event()
            with anyio.move_on_after(interval):
                await self.st.wake_poller.wait()
            if self.st.done:
                return
            changed = await self._poll_once(await self.infos())
            changed |= await self._settle_in_loop()
            if changed:
                interval = self.options.poll_min
                self.st.wake_submitter.set()
            else:
                interval = min(self.options.poll_max, interval * 1.5)

    async def _settle_in_loop(self) -> bool:
        async with self.st.lock:
            infos = await self.infos()
            since = self.st.settle_failing_since
            give_up = (
                self.st.settle_failures + 1 >= self.options.settle_attempts
                and since is not None
                and time.monotonic() - since >= self.options.settle_patience
            )
            count, error = await settle_intents(
                self.campaign, self.scheduler, infos, give_up=give_up, say_late=self.say_new
            )
            if give_up or not error:  # a lookup that answered, or the last one the run waits for
                self.st.late_lookups.update(i.attempt.path for i in infos if late_intent(i))
        if error:
            self.st.settle_failures += 1
            if self.st.settle_failing_since is None:
                self.st.settle_failing_since = time.monotonic()
            self.say(f"cannot settle submission intents yet: {error}")
        else:
            self.st.settle_failures = 0
            self.st.settle_failing_since = None
        return count > 0

    async def _poll_once(self, infos: list[AttemptInfo]) -> bool:
        wanted = to_poll(infos, self.st)
        if not wanted:
            return False
        try:
            statuses = await self.scheduler.poll([i.job_id for i in wanted])
        except QueryFailed as exc:
            self.say(f"cannot query the scheduler: {exc}; retrying")
            return False
        changed = False
        clock = time.monotonic()
        for info in wanted:
            receipt = info.attempt.receipt
            assert receipt is not None, "to_poll keeps only attempts with a receipt"
            status = statuses.get(receipt.job_id)
            self._note_status(receipt.job_id, status)
            if never_starts_now(self, receipt.job_id, status, clock):
                assert status is not None and status.pending is not None, "never starts: by its pending reason"
                changed |= await refuse(self, info, status.pending)
                continue
            if self.st.budget and status is not None and status.state == "pending":
                changed |= await budget.settle_pending(self, info, status)
                continue
            if status is not None and status.state in ("gone", "unknown"):
                changed |= settle_vanished(self, info, status, clock)
                continue
            self.st.vanished_since.pop(receipt.job_id, None)
            if status is None or not status.finished:
                continue
            changed |= self._note_end(status, clock)
            if await ended_early.settle(self, info, status):
                changed = True
            elif info.attempt.result is None:
                if not await late_results.settle(self, info, status, clock):
                    continue  # waiting for the result; the final accounting is recorded after it
                changed = True
            # The grace for a late row counts from sacct's first row for the job. No row at all
            # means sacct did not answer (slurmdbd down): wait much longer for it to come back
            # before keeping a receipt without its final accounting.
            if status.accounting is not None:
                self.st.first_seen_row.setdefault(receipt.job_id, clock)
            row_since = self.st.first_seen_row.get(receipt.job_id)
            grace = self.options.accounting_grace
            overdue = (row_since is not None and clock - row_since >= grace) or (
                clock - self.st.first_seen_finished[receipt.job_id] >= 10 * grace
            )
            limit = self.campaign.manifest.profile.time_limit_minutes
            final = status.accounting_final and not ended_early.exit_code_pending(status, limit)
            if final or overdue:
                missing = "" if status.accounting is not None else "Slurm's accounting gave no row for this job"
                record_accounting(info, status.accounting, final, missing=missing)
                if not final:
                    self.st.accounting_given_up.add(receipt.job_id)
                changed = True
        return changed

    def _note_end(self, status, clock: float) -> bool:
        """The first time this run sees the job ended (True then): when, and how long it ran."""
        if status.job_id in self.st.finished:
            return False
        self.st.finished[status.job_id] = status.state
        self.st.first_seen_finished[status.job_id] = clock
        if status.accounting and status.accounting.elapsed_seconds:
            self.st.durations.append(status.accounting.elapsed_seconds)
        return True

    def _note_status(self, job_id: str, status) -> None:
        """Note the scheduler's word: pending (the progress line) and seen out (not retried as ended unwatched)."""
        if status is not None and status.pending is not None:
            self.st.pending[job_id] = status.pending
        else:
            self.st.pending.pop(job_id, None)
        if status is not None and status.state in ("pending", "running"):
            self.st.seen_out.add(job_id)

    # -------------------------------------------------------------- signals

    async def _signals(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                self.st.interrupted = True
                out = jobs_out(await self.infos(), self.st.finished)
                self._end_progress()
                print(
                    f"\nInterrupted. {out} submitted job(s) keep running. Resume with:\n  {self.options.resume_command}",
                    file=sys.stderr,
                    flush=True,
                )
                scope.cancel()
                return

    # ------------------------------------------------------------- progress

    def _progress(self, infos: list[AttemptInfo], curves: list[Curve]) -> None:
        if not self.options.progress:
            return
        line = progress_line(
            infos,
            curves,
            pending=self.st.pending,
            durations=self.st.durations,
            slots=self.slots,
            limit_note=self.limit.note,
        )
        self.st.last_line = show(line, self.st.last_line)

    def _end_progress(self) -> None:
        if sys.stderr.isatty() and self.st.last_line:
            print(file=sys.stderr)

    def say(self, message: str) -> None:
        self.st.said.add(message)
        self._end_progress()
        print(f"[sweep] {message}", file=sys.stderr, flush=True)

    def say_new(self, message: str) -> None:
        if message not in self.st.said:
            self.say(message)


def resume_command(output: Path, driver: str = "throughput-sweep") -> str:
    return f"{driver} run --output {shlex.quote(str(output))} --resume"
