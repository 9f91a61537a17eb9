"""Which parameters Muon owns, what its Newton-Schulz iterations cost, and how a campaign
that trains with it is described against the guide (which trains with AdamW).

Muon updates the hidden 2-D matrices: every 2-D weight inside the layers (attention's q, k,
v and output projections, the MLP's gate, up and down). The embedding, an untied LM head,
the norms' gains and any bias stay on AdamW, as Muon's authors and torch's documentation
prescribe. The model stores q, k and v as one fused `qkv` weight and gate and up as one
`gate_up`; Muon orthogonalises each of them as separate matrices (row blocks of the fused
weight), as the reference implementations that keep them separate do: a fused weight taken
whole would be orthogonalised as one matrix, which moves the weights differently and gets
another adjusted learning rate (it is wider).

The worker (`tiny_llm.arena_muon`), the floor and the report read the split here, so the
FLOPs counted and the matrices updated are the same ones.
"""

from __future__ import annotations

from typing import NamedTuple

from throughput_schema.configs import ModelConfig, OptimizerConfig, Protocol
from throughput_schema.shape import weight_shapes

MUON = "muon"
# The optimizer the guide's protocol trains with.
GUIDE_OPTIMIZER = OptimizerConfig().name


class MuonMatrix(NamedTuple):
    """One matrix Muon orthogonalises: rows `start:stop` of parameter `name` (all its columns)."""

    name: str
    start: int
    stop: int
    cols: int

    @property
    def label(self) -> str:
        return f"{self.name}[{self.start}:{self.stop}]"

    @property
    def shape(self) -> tuple[int, int]:
        return (self.stop - self.start, self.cols)


class NoMuonMatrix(ValueError):
    """A model without a hidden 2-D matrix: Muon would own nothing."""


def _row_blocks(model: ModelConfig, name: str, rows: int) -> list[int]:
    if name.endswith(".attn.qkv.weight"):
        q, kv = model.n_heads * model.head_dim, model.kv_heads * model.head_dim
        return [q, kv, kv]
    if name.endswith(".mlp.gate_up.weight"):
        return [model.ffn_dim, model.ffn_dim]
    return [rows]


def owns(name: str, ndim: int) -> bool:
    """Muon's parameters: 2-D and inside a layer (`blocks.`); AdamW has every other one."""
    return ndim == 2 and name.startswith("blocks.")


def muon_matrices(model: ModelConfig) -> list[MuonMatrix]:
    """Muon's matrices in the model's parameter order, fused weights split (module docstring)."""
    out = []
    for name, shape in weight_shapes(model).items():
        if not owns(name, len(shape)):
            continue
        start = 0
        for rows in _row_blocks(model, name, shape[0]):
            out.append(MuonMatrix(name, start, start + rows, shape[1]))
            start += rows
    if not out:
        raise NoMuonMatrix("the model has no hidden 2-D matrix for Muon to own; use optimizer.name=adamw")
    return out


def ownership(optimizer: OptimizerConfig, model: ModelConfig) -> dict[str, list[str]]:
    """Which parameters each optimizer owned, as a result records it: {} for AdamW alone (it owns
    every parameter); for Muon, its matrices (`name[start:stop]`) and AdamW's parameters."""
    if optimizer.name != MUON:
        return {}
    return {
        MUON: [m.label for m in muon_matrices(model)],
        "adamw": [n for n, shape in weight_shapes(model).items() if not owns(n, len(shape))],
    }


def adjusted_lr(config: OptimizerConfig, shape: tuple[int, int]) -> float:
    """torch.optim.Muon's learning-rate adjustment for one matrix (its `_adjust_lr`)."""
    rows, cols = shape
    if config.muon_adjust_lr == "match_rms_adamw":
        return config.lr * 0.2 * max(rows, cols) ** 0.5
    return config.lr * max(1.0, rows / cols) ** 0.5


def newton_schulz_flops(shapes: list[tuple[int, int]], steps: int) -> float:
    """FLOPs of `steps` quintic iterations per matrix: X·Xᵀ (2m²n), A·A (2m³) and B·X (2m²n),
    m the smaller side (the iteration runs on the wide orientation)."""
    total = 0.0
    for rows, cols in shapes:
        m, n = min(rows, cols), max(rows, cols)
        total += steps * (4 * m * m * n + 2 * m**3)
    return total


def settings_text(protocol: Protocol) -> str:
    """Muon's settings in words, for the lines that name the optimizer."""
    c = protocol.muon_ns_coefficients
    return (
        f"momentum {protocol.muon_momentum:g}{', Nesterov' if protocol.muon_nesterov else ''}, "
        f"{protocol.muon_ns_steps} Newton-Schulz steps ({c[0]:g}, {c[1]:g}, {c[2]:g}), "
        f"lr adjusted {protocol.muon_adjust_lr}; q, k, v, gate and up as separate matrices; "
        "AdamW on the embedding, norms and biases"
    )


def optimizer_deviation(protocol: Protocol) -> str | None:
    """One line when the campaign trains with another optimizer than the guide's, else None."""
    if protocol.optimizer == GUIDE_OPTIMIZER:
        return None
    return f"optimizer differs from the guide: {protocol.optimizer} ({settings_text(protocol)}; guide: AdamW)"
