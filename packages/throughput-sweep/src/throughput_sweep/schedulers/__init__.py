"""Schedulers behind one small interface: Slurm and the local machine."""

from throughput_sweep.schedulers.base import JobStatus, QueryFailed, Scheduler, SubmitFailed

__all__ = ["JobStatus", "QueryFailed", "Scheduler", "SubmitFailed"]
