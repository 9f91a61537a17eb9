"""Combined PDF report, figures and training-time projections from throughput campaigns."""

__version__ = "0.1.0"
