"""Re-derives every figure of a throughput campaign and checks it against Slurm accounting."""

__version__ = "0.1.0"
