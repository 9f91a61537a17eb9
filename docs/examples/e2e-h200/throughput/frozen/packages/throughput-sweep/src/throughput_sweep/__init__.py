"""Crash-safe batch-doubling throughput campaigns on Slurm or the local machine."""

__version__ = "0.1.0"
