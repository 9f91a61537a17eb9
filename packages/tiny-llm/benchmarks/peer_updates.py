"""The updates a user would write instead of ours, timed as ours is (`peers.py` runs them).

- peer A: plain compiled PyTorch: the same model module, torch.compile (default mode),
  clip_grad_norm_(foreach=True), torch.optim.AdamW(fused=True), no CUDA graph; at an FP8
  precision (`training.precision`) torchao's `convert_to_float8_training` first, over the
  linears our filter picks (`tiny_llm.fp8.convert`), so the two updates differ only in how
  they run, not in which matmuls are FP8;
- peer Muon: peer A with torch.optim.Muon (the recipe's Muon settings) on Muon's matrices and
  fused AdamW on the rest, the split ArenaMuon uses (`throughput_schema.muon`): q, k, v, gate
  and up are Parameters aliasing their rows of the fused weights, so torch's own Muon runs on
  them without touching the model;
- peer B: transformers' causal LM of the same shape with SDPA attention, no compile, the same
  optimizer and clipping (`tiny_llm.hf_weights.transformers_model` picks the class).

Imported by `peers.py`, after it has put the workspace's sources on the path.
"""

from __future__ import annotations

import statistics
import time

import torch

from throughput_schema.muon import muon_matrices, owns
from throughput_schema.precision import is_fp8
from tiny_llm.graph import time_replays
from tiny_llm.model import build_model
from tiny_llm.update import make_inputs

CUDA = torch.device("cuda")


def timed_rate(step, tokens: int, seconds: float, windows: int) -> dict:
    """Warm up, size a window to `seconds`, return the median of `windows` window rates."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    per = (time.perf_counter() - t0) / 3
    n = max(3, round(seconds / per))
    rates = []
    for _ in range(windows):
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        torch.cuda.synchronize()
        rates.append(n * tokens / (time.perf_counter() - t0))
    return {"tokens_per_second": statistics.median(rates), "window_rates": rates, "updates_per_window": n}


def fused_adamw(params: list[torch.nn.Parameter], o) -> torch.optim.AdamW:
    """torch's fused AdamW with the recipe's settings, weight decay on matrices only."""
    return torch.optim.AdamW(
        [
            {"params": [p for p in params if p.ndim >= 2], "weight_decay": o.weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
        ],
        lr=o.lr,
        betas=(o.beta1, o.beta2),
        eps=o.eps,
        fused=True,
    )


class TorchMuon:
    """torch.optim.Muon over Muon's matrices and fused AdamW over the rest, stepped together."""

    def __init__(self, model, o) -> None:
        by_name = dict(model.named_parameters())
        self.slices = []
        for m in muon_matrices(model.cfg):  # rows m.start:m.stop of a weight, as a Parameter of its own
            self.slices.append((torch.nn.Parameter(by_name[m.name].data[m.start : m.stop]), by_name[m.name], m))
        self.muon = torch.optim.Muon(
            [s for s, _, _ in self.slices],
            lr=o.lr,
            weight_decay=o.weight_decay,
            momentum=o.muon_momentum,
            nesterov=o.muon_nesterov,
            ns_coefficients=o.muon_ns_coefficients,
            ns_steps=o.muon_ns_steps,
            adjust_lr_fn=o.muon_adjust_lr,
        )
        self.adamw = fused_adamw([p for n, p in by_name.items() if not owns(n, p.ndim)], o)

    def step(self) -> None:
        for s, p, m in self.slices:
            s.grad = p.grad[m.start : m.stop]  # a view: contiguous rows of the fused gradient
        self.muon.step()
        self.adamw.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none=set_to_none)
        self.adamw.zero_grad(set_to_none=set_to_none)


def case_peer_a(recipe, seconds, windows) -> dict:
    return compiled_peer(recipe, seconds, windows, lambda model, params: fused_adamw(params, recipe.optimizer))


def case_peer_muon(recipe, seconds, windows) -> dict:
    return compiled_peer(recipe, seconds, windows, lambda model, params: TorchMuon(model, recipe.optimizer))


def compiled_peer(recipe, seconds, windows, make_optimizer) -> dict:
    """Peer A's update with the optimizer `make_optimizer(model, parameters)` makes."""
    model = build_model(recipe.model, CUDA, seed=recipe.training.seed)
    fp8 = None
    if is_fp8(recipe.training.precision):
        from tiny_llm.fp8 import convert

        fp8 = convert(model, recipe.training.precision)
    compiled = torch.compile(model)
    params = list(model.parameters())
    opt = make_optimizer(model, params)
    inputs, targets = make_inputs(recipe, CUDA)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = compiled(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, recipe.training.grad_clip, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    first = step().item()
    setup = time.perf_counter() - t0
    out = timed_rate(step, recipe.training.batch_tokens, seconds, windows)
    out["setup_seconds"] = setup
    out["first_loss"] = first
    out["fp8_linears"] = len(fp8.converted) if fp8 else 0
    out["parameters"] = sum(p.numel() for p in params)
    # The peer's optimizer alone (clip + its step) with events, on gradients left by a backward.
    with torch.autocast("cuda", dtype=torch.bfloat16):
        compiled(inputs, targets).backward()

    def opt_only():
        torch.nn.utils.clip_grad_norm_(params, recipe.training.grad_clip, foreach=True)
        opt.step()

    out["optimizer_ms"] = statistics.median(time_replays(opt_only, 20, 5))
    del model, compiled, opt
    return out


def case_peer_b(recipe, seconds, windows) -> dict:
    from tiny_llm.hf_weights import transformers_model

    o = recipe.optimizer
    torch.manual_seed(recipe.training.seed)
    with CUDA:
        model = transformers_model(recipe.model)  # SDPA attention
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    opt = fused_adamw(params, o)
    inputs, targets = make_inputs(recipe, CUDA)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=inputs).logits
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, recipe.training.grad_clip, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)

    out = timed_rate(step, recipe.training.batch_tokens, seconds, windows)
    out["parameters"] = n_params
    out["model_class"] = type(model).__name__
    del model, opt
    return out
