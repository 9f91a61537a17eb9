"""The shape a recipe implies: every trainable tensor of the decoder, the parameter count
derived from that table, and the training FLOPs per token.

This is the one production home of that arithmetic: the worker, the controller, the
report and the benchmarks call it, and the worker checks the model it built against it.
The audit (`throughput_audit.stats`) derives the same figures again by its own route, so
a wrong table here and a wrong model there each show.

The tensors carry the names and shapes they have in `tiny_llm.model`: a token embedding;
per layer an RMSNorm weight for attention and one for the MLP (on the sublayer's input, or
where a knob says so on its output), a fused q/k/v
projection (`n_heads` query heads and `kv_heads` key and value heads of `head_dim` each),
an output projection without bias, a gated MLP with fused gate/up and a down projection;
a final RMSNorm; and whatever tensors the model's knobs add, in a layer or outside the
layers, as each knob declares them (`throughput_schema.knobs`). Rotary tables are buffers,
not parameters.
"""

from __future__ import annotations

import math

from throughput_schema import knobs
from throughput_schema.configs import ModelConfig


def weight_shapes(model: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every trainable tensor by its name in the worker's model, with its shape."""
    d, hd = model.d_model, model.head_dim
    q_width, kv_width = model.n_heads * hd, model.kv_heads * hd
    qkv_rows = q_width + 2 * kv_width
    shapes: dict[str, tuple[int, ...]] = {"embed.weight": (model.vocab_size, d)}
    added = knobs.layer_tensors(model)
    for i in range(model.n_layers):
        block = f"blocks.{i}"
        shapes[f"{block}.attn_norm.weight"] = (d,)
        shapes[f"{block}.attn.qkv.weight"] = (qkv_rows, d)
        shapes |= {f"{block}.{name}": shape for name, shape in added.items()}
        shapes[f"{block}.attn.proj.weight"] = (d, q_width)
        shapes[f"{block}.mlp_norm.weight"] = (d,)
        shapes[f"{block}.mlp.gate_up.weight"] = (2 * model.ffn_dim, d)
        shapes[f"{block}.mlp.down.weight"] = (d, model.ffn_dim)
    shapes["norm.weight"] = (d,)
    return shapes | knobs.model_tensors(model)


def parameter_count(model: ModelConfig) -> int:
    """Exact trainable parameters: the sum of the elements of every tensor in `weight_shapes`."""
    return sum(math.prod(shape) for shape in weight_shapes(model).values())


def matmul_parameters(model: ModelConfig) -> int:
    """The parameters that take part in a matmul per token: all of them, less an input
    embedding that has an LM head of its own beside it, which makes it a lookup (the LM head
    is always a matmul; where there is none of its own, it is the embedding, counted once)."""
    shapes = weight_shapes(model)
    lookup = math.prod(shapes["embed.weight"]) if "lm_head.weight" in shapes else 0
    return parameter_count(model) - lookup


def flops_per_token(model: ModelConfig) -> int:
    """Training FLOPs per token: 6·N + 12·heads·head_dim·T summed over the layers (PaLM,
    appendix B), with min(T, window) in place of T in a windowed layer.

    N is `matmul_parameters`; the attention term uses the width attention really has,
    `n_heads * head_dim`, which need not be `d_model`. Like the global term it is not halved
    for causality; a windowed layer counts the keys its window lets each query see
    (`throughput_schema.knobs.attended_keys`), so MFU does not count work the window never does.
    """
    attention = 12 * model.n_heads * model.head_dim * knobs.attended_keys(model)
    return 6 * matmul_parameters(model) + attention
