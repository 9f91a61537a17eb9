"""Llama-style models, ArenaAdamW and the complete-update CUDA-graph throughput worker."""

__version__ = "0.1.0"
