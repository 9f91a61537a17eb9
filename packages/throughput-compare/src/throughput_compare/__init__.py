"""Compares two audited campaigns of one kind: `throughput-compare A B --output OUT`."""

__version__ = "0.1.0"
