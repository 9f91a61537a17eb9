"""The report's own parameter count, from the architecture's weight tensors.

The schema's `parameter_count` is the formula every other tool uses; a check that calls
it checks nothing. This lists every trainable tensor of the decoder the worker builds
(`tiny_llm.model`), by the name and shape it has there, and adds up their elements; a
test compares the list with the real model's `named_parameters` for every preset.

The decoder: a token embedding that the LM head shares (tied: counted once); per layer
an RMSNorm weight before attention and one before the MLP, a fused q/k/v projection with
as many key/value heads as query heads (the recipe has no grouped-query setting), an
output projection, and a SwiGLU MLP with fused gate/up and a down projection, all
without biases; a final RMSNorm. Rotary tables are buffers, not parameters.
"""

from __future__ import annotations

import math

from throughput_schema.configs import ModelConfig


def weight_shapes(model: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every trainable tensor by its name in the worker's model, with its shape."""
    d, inner = model.d_model, model.n_heads * model.head_dim
    kv_heads = model.n_heads  # no grouped-query attention in these recipes
    qkv_rows = inner + 2 * kv_heads * model.head_dim
    shapes: dict[str, tuple[int, ...]] = {"embed.weight": (model.vocab_size, d)}
    for i in range(model.n_layers):
        block = f"blocks.{i}"
        shapes[f"{block}.attn_norm.weight"] = (d,)
        shapes[f"{block}.attn.qkv.weight"] = (qkv_rows, d)
        shapes[f"{block}.attn.proj.weight"] = (d, inner)
        shapes[f"{block}.mlp_norm.weight"] = (d,)
        shapes[f"{block}.mlp.gate_up.weight"] = (2 * model.ffn_dim, d)
        shapes[f"{block}.mlp.down.weight"] = (d, model.ffn_dim)
    shapes["norm.weight"] = (d,)
    # lm_head.weight is embed.weight (tied), so it adds no parameters of its own.
    return shapes


def count_parameters(model: ModelConfig) -> int:
    return sum(math.prod(shape) for shape in weight_shapes(model).values())
