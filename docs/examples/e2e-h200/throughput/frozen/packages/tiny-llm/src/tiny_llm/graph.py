"""Capturing the complete update as one CUDA graph, and timing graphs with events.

Why a whole-update graph: small models are launch-bound (hundreds of kernels per
update, each a few microseconds of CPU launch cost); one `graph.replay()` launches
them all at once, and the optimizer, clip and counters ride along for free.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# Eager updates before capture: the first compiles forward and backward (and runs
# autograd's and cuBLAS's lazy initialisation); the others make sure no
# allocation or initialisation is left to happen for the first time inside capture.
EAGER_BEFORE_CAPTURE = 3


def capture_update(update: Callable[[], None], *, on_phase: Callable[[str], None] = lambda p: None):
    """Run the update eagerly on a side stream, then capture it. Returns (graph, eager updates run)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        on_phase("compile")
        update()
        for _ in range(EAGER_BEFORE_CAPTURE - 1):
            update()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    on_phase("capture")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        update()
    torch.cuda.synchronize()
    return graph, EAGER_BEFORE_CAPTURE


def capture(fn: Callable[[], None], warmup: int = 2) -> torch.cuda.CUDAGraph:
    """Capture any side-effecting callable (used for ArenaAdamW.step alone)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph


def time_replays(replay: Callable[[], None], replays: int, rounds: int = 5) -> list[float]:
    """Milliseconds per replay, measured with ordinary events around `replays` replays, per round."""
    out = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            replay()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / replays)
    return out
