"""A Llama-style decoder built from a `throughput_schema.ModelConfig`.

RMSNorm, SwiGLU, rotary position embeddings and causal attention through
`F.scaled_dot_product_attention`, so PyTorch picks its fastest attention kernel (flash /
cuDNN on Hopper), with the knobs the small Llama family turns (`ModelConfig`): fewer
key/value heads than query heads (grouped-query attention, handed to the kernel as they
are with `enable_gqa`, never repeated), an untied LM head, a head size of its own, biases
on q, k and v (Qwen2), RMSNorm on each head of q and k (Qwen3), Llama 3's RoPE scaling,
layers without RoPE (SmolLM3's NoPE layers), RMSNorm over the whole of q and of k and norms on
the sublayers' outputs instead of their inputs (both OLMo 2), and Gemma 3's: sliding-window
attention in some layers with a RoPE base of their own, (1 + weight) norms, four norms a layer,
a GeGLU MLP, embeddings scaled by sqrt(width) and an attention scale of its own.
The defaults build the original decoder: as many kv heads as heads, tied embeddings, no
biases, no q/k norm, plain RoPE.

The parameter count equals `throughput_schema.recipe.parameter_count` exactly: q, k, v
are stored as one fused `qkv` matrix ([q | k | v] along its output) plus `proj`, and
SwiGLU's gate and up matrices as one `gate_up` matrix (fewer, larger matmuls; the same
number of weights). `tiny_llm.hf_weights` maps a transformers checkpoint onto these names.
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

from throughput_schema import ModelConfig
from throughput_schema.configs import Llama3RopeScaling, RopeScaling
from tiny_llm.cross_entropy import chunked_cross_entropy
from tiny_llm.kernel_registry import load_fa4, load_triton, resolve_kernels, resolve_swiglu
from tiny_llm.kernels import Kernels


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, offset: bool = False) -> None:
        super().__init__()
        self.eps, self.offset = eps, offset
        # Gemma stores its gains as offsets from 1, so a fresh norm (weight 0) is the identity gain.
        self.weight = nn.Parameter(torch.zeros(dim) if offset else torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # F.rms_norm computes in the input's dtype; inductor fuses it with its neighbours.
        return F.rms_norm(x, (x.shape[-1],), 1.0 + self.weight if self.offset else self.weight, self.eps)


def window_handling(attention: str, cfg: ModelConfig) -> str | None:
    """How the windowed layers' attention ran, where a window is shorter than the context:
    "skipped" (FA4 never computes the blocks outside the window, so the window saves its work)
    or "masked" (SDPA computes every causal score and masks those outside it: the window saves
    nothing, and the FLOPs convention then under-counts the work done). None: no such layer."""
    if not cfg.sliding_layers or cfg.sliding_window is None or cfg.sliding_window >= cfg.context_length:
        return None
    return "skipped" if attention == "fa4" else "masked"


def window_mask(T: int, window: int, device: torch.device) -> torch.Tensor:
    """(T, T) True where query i sees key j: causal, and j > i - window (itself and the window
    - 1 keys before it, as transformers' sliding-window mask)."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril().triu(1 - window)


def rope_tables(
    head_dim: int, context: int, theta: float, device=None, scaling: RopeScaling | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape (context, head_dim), in the "rotate half" layout Llama uses."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    if scaling is not None:
        inv_freq = llama3_inv_freq(inv_freq, scaling)
    angles = torch.outer(torch.arange(context, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def llama3_inv_freq(inv_freq: torch.Tensor, s: Llama3RopeScaling) -> torch.Tensor:
    """Llama 3's scaling of the inverse frequencies, step for step as transformers'
    `_compute_llama3_parameters`: wavelengths longer than the original context / low_freq_factor
    are slowed by `factor`, those shorter than original / high_freq_factor are kept, and the
    band between is interpolated."""
    old_context = s.original_max_position_embeddings
    low_freq_wavelen, high_freq_wavelen = old_context / s.low_freq_factor, old_context / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: (B, H, T, D) with cos/sin (T, D), or (B, T, H, D) with cos/sin (T, 1, D). Rotation in FP32 then back: the tables are FP32
    # and rotating BF16 values directly would round the angles' products twice.
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    rotated = torch.cat((-x2, x1), dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, kernels: Kernels = Kernels(), layer: int = 0) -> None:
        super().__init__()
        self.n_heads, self.kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        # SmolLM3's NoPE layers attend without positions: q and k are used as projected. (The
        # fused RoPE kernels rotate every layer, so `tiny_llm.kernels` refuses them here.)
        self.rotary = layer not in cfg.nope_layers
        # Gemma 3's windowed layers: each query sees itself and the window - 1 keys before it.
        self.window = cfg.sliding_window if layer in cfg.sliding_layers else None
        self.scale = None if cfg.attn_scale_dim is None else cfg.attn_scale_dim**-0.5  # None: 1/sqrt(head_dim)
        # Fewer kv heads: each serves n_heads / kv_heads query heads, and SDPA reads them as they
        # are (enable_gqa) instead of a repeated copy of k and v.
        self.grouped = cfg.kv_heads != cfg.n_heads
        self.sdpa_backends = kernels.sdpa_backends()  # None: PyTorch chooses
        q_width, kv_width = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        self.widths = (q_width, kv_width, kv_width)
        self.qkv = nn.Linear(cfg.d_model, q_width + 2 * kv_width, bias=cfg.qkv_bias)
        self.proj = nn.Linear(q_width, cfg.d_model, bias=False)
        # Qwen3: each head of q and of k RMS-normed over head_dim, before RoPE. OLMo 2: the whole
        # of q and of k, all heads together, before they are split into heads.
        self.whole_norm = cfg.qk_norm_whole
        q_span, k_span = (q_width, kv_width) if cfg.qk_norm_whole else (cfg.head_dim, cfg.head_dim)
        qk_normed = cfg.qk_norm or cfg.qk_norm_whole
        self.q_norm = RMSNorm(q_span, cfg.norm_eps, cfg.norm_offset) if qk_normed else None
        self.k_norm = RMSNorm(k_span, cfg.norm_eps, cfg.norm_offset) if qk_normed else None
        # None: the split and `apply_rope` below, fused by inductor when compiled.
        device = self.qkv.weight.device
        self.fa4 = load_fa4(device, cfg, kernels.rope) if kernels.attention == "fa4" else None
        self.fa4_rope = self.fa4 is not None and kernels.rope == "triton"
        self.rope = load_triton("rope", device, cfg) if kernels.rope == "triton" and self.fa4 is None else None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        if self.fa4 is not None and self.fa4_rope:
            y = self.fa4(self.qkv(x), cos, sin, self.n_heads, self.kv_heads, self.window, self.scale)
            return self.proj(y.reshape(B, T, -1))
        if self.fa4 is not None:
            return self.proj(self.fa4(*self.rotated_bthd(x, cos, sin), self.window, self.scale).reshape(B, T, -1))
        if self.rope is not None:
            q, k, v = self.rope(self.qkv(x), cos, sin, self.n_heads, self.kv_heads)
        else:
            q, k, v = (t.transpose(1, 2) for t in self.heads(x))  # (B, H, T, D)
            if self.rotary:
                q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.sdpa_backends is None:
            y = self.sdpa(q, k, v)
        else:
            # A pinned kernel (Kernels.attention); dynamo traces this context manager,
            # so the compiled forward and backward (and the CUDA graph) use that kernel.
            with sdpa_kernel(self.sdpa_backends):
                y = self.sdpa(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))

    def sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal SDPA of (B, H, T, D) q, k, v. A window shorter than the sequence is an explicit
        mask: SDPA has no window of its own, so its kernels compute every causal score and mask
        them (the window saves nothing here; FA4 skips the masked blocks)."""
        T = q.shape[2]
        if self.window is None or self.window >= T:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale, enable_gqa=self.grouped)
        mask = window_mask(T, self.window, q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=self.grouped)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v as (B, T, heads, D) views of the projection's output, q and k normed (if so)."""
        B, T, _ = x.shape
        if self.whole_norm and self.q_norm is not None and self.k_norm is not None:
            q, k, v = self.qkv(x).split(self.widths, dim=-1)
            q, k = self.q_norm(q), self.k_norm(k)  # over all heads at once, then split into heads
            return q.view(B, T, -1, self.head_dim), k.view(B, T, -1, self.head_dim), v.view(B, T, -1, self.head_dim)
        if self.grouped:
            q, k, v = (t.view(B, T, -1, self.head_dim) for t in self.qkv(x).split(self.widths, dim=-1))
        else:
            # The same tensors as the split, but inductor compiles the split into a measurably
            # slower update (docs/performance.md).
            q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).unbind(dim=2)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k, v

    def rotated_bthd(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """q and k rotated, and v, in the projection's (B, T, H, D) layout, as FA4 reads them: no
        transpose. q and k come out of inductor's fused RoPE as new tensors; v stays a strided
        view of the projection's output, which the kernel reads in place."""
        q, k, v = self.heads(x)
        if not self.rotary:
            return q, k, v
        cos, sin = cos[:, None, :], sin[:, None, :]  # (T, 1, D): the same angle for every head
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


class SwiGLU(nn.Module):
    """The gated MLP: down(act(gate) * up), act SiLU (SwiGLU) or tanh-approximated GELU (GeGLU)."""

    def __init__(self, cfg: ModelConfig, kernels: Kernels = Kernels()) -> None:
        super().__init__()
        self.gate_up = nn.Linear(cfg.d_model, 2 * cfg.ffn_dim, bias=False)
        self.down = nn.Linear(cfg.ffn_dim, cfg.d_model, bias=False)
        self.gelu = cfg.mlp_activation == "gelu_tanh"
        self.kernel = resolve_swiglu(kernels.swiglu, self.gate_up.weight.device, cfg)
        # None: silu(gate) * up below, fused by inductor when compiled.
        self.fused = load_triton("swiglu", self.gate_up.weight.device, cfg) if self.kernel == "triton" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused is not None:
            return self.down(self.fused(self.gate_up(x)))
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down((F.gelu(gate, approximate="tanh") if self.gelu else F.silu(gate)) * up)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, kernels: Kernels = Kernels(), layer: int = 0) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.norm_offset)
        self.attn = Attention(cfg, kernels, layer)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.norm_offset)
        self.mlp = SwiGLU(cfg, kernels)
        self.post_norm = cfg.post_norm
        # Gemma 3: each sublayer's output normed too, before the add (its knob's extra weights).
        if cfg.sandwich_norm:
            self.attn_post_norm = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.norm_offset)
            self.mlp_post_norm = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.norm_offset)
        self.sandwich = cfg.sandwich_norm

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.post_norm:  # OLMo 2: the sublayer reads the stream as it is; its output is normed
            x = x + self.attn_norm(self.attn(x, cos, sin))
            return x + self.mlp_norm(self.mlp(x))
        if self.sandwich:
            x = x + self.attn_post_norm(self.attn(self.attn_norm(x), cos, sin))
            return x + self.mlp_post_norm(self.mlp(self.mlp_norm(x)))
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


def fused_norm_blocks(model: Transformer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The blocks and the final norm as `Kernels(norm="triton")` runs them: each residual add
    fused with the norm that follows it (the next sublayer's, or the final one), one Triton pass
    forward and one backward (`tiny_llm.triton_norm`). The same parameters and the same
    arithmetic as `Block.forward`; returns the final norm's output in the autocast dtype."""
    # Importable here: the model's construction loaded it (`load_triton`).
    from tiny_llm.triton_norm import add_rms_norm as add_norm
    from tiny_llm.triton_norm import rms_norm

    # The normed activations in the dtype the next matmul reads: what autocast would cast them to.
    kind = x.device.type
    dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else x.dtype
    blocks = [cast(Block, b) for b in model.blocks]
    first = blocks[0].attn_norm
    h = rms_norm(x, first.weight, first.eps, dtype)
    for i, block in enumerate(blocks):
        x, h = add_norm(x, block.attn(h, *model.rope_of(i, cos, sin)), block.mlp_norm.weight, block.mlp_norm.eps, dtype)
        if i + 1 < len(blocks):
            nxt = blocks[i + 1].attn_norm
            x, h = add_norm(x, block.mlp(h), nxt.weight, nxt.eps, dtype)
        else:  # the last residual feeds only the final norm
            h = add_norm(x, block.mlp(h), model.norm.weight, model.norm.eps, dtype, keep=False)
    return h


class Transformer(nn.Module):
    rope_cos: torch.Tensor  # buffers registered in __init__; nn.Module's __getattr__ types them loosely
    rope_sin: torch.Tensor
    local_cos: torch.Tensor
    local_sin: torch.Tensor

    def __init__(self, cfg: ModelConfig, kernels: Kernels = Kernels()) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        # "auto" resolved for this device: `self.kernels` is what runs (the worker records it).
        kernels = resolve_kernels(kernels, self.embed.weight.device, cfg)
        self.cfg, self.kernels = cfg, kernels
        self.blocks = nn.ModuleList(Block(cfg, kernels, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.norm_offset)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:  # the output projection reuses the embedding matrix
            self.lm_head.weight = self.embed.weight
        cos, sin = rope_tables(
            cfg.head_dim, cfg.context_length, cfg.rope_theta, self.embed.weight.device, cfg.rope_scaling
        )
        # Buffers, not parameters: they move with .to() but are neither trained nor counted.
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        # Gemma 3's windowed layers rotate with a base of their own: their tables, by layer.
        self.local_layers = frozenset(cfg.sliding_layers) if cfg.rope_local_theta is not None else frozenset()
        if self.local_layers:
            theta = cast(float, cfg.rope_local_theta)
            cos, sin = rope_tables(cfg.head_dim, cfg.context_length, theta, self.embed.weight.device)
            self.register_buffer("local_cos", cos, persistent=False)
            self.register_buffer("local_sin", sin, persistent=False)
        self.embed_scale = cfg.d_model**0.5 if cfg.embed_scale else None
        # None: the default or chunked loss below; else the LM head and loss in one Triton pass.
        device = self.embed.weight.device
        self.fused_loss = load_triton("cross_entropy", device, cfg) if kernels.cross_entropy == "triton" else None
        # None: each block's adds and norms as `Block.forward`; else `fused_norm_blocks`.
        self.fused_norm = load_triton("norm", device, cfg) if kernels.norm == "triton" else None
        self.reset_parameters()

    def rope_of(self, layer: int, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The RoPE tables `layer` rotates with: the windowed layers' own base, else `cos`, `sin`."""
        if layer in self.local_layers:
            T = cos.shape[0]
            return self.local_cos[:T], self.local_sin[:T]
        return cos, sin

    @torch.no_grad()
    def reset_parameters(self) -> None:
        # GPT-2 style init: N(0, 0.02), residual output projections scaled by 1/sqrt(2·layers)
        # so the residual stream's variance does not grow with depth; norm gains 1, biases 0.
        # Drawn in registration order, so a knob's extra tensors (an untied head, last) leave
        # every other tensor's draw as the default model's.
        if self.embed.weight.is_meta:
            return
        residual_std = 0.02 / math.sqrt(2 * self.cfg.n_layers)
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                p.zero_()
            elif p.ndim == 1:  # a norm's gain: 1, stored as 0 where the norms scale by (1 + weight)
                p.fill_(0.0 if self.cfg.norm_offset else 1.0)
            elif name.endswith(("proj.weight", "down.weight")):
                p.normal_(0.0, residual_std)
            else:
                p.normal_(0.0, 0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for `idx` (B, T), or with `targets` the mean cross-entropy."""
        T = idx.shape[1]
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        x = self.embed(idx)
        if self.embed_scale is not None:
            # A Python number: the multiply rounds it to the embedding's dtype, as Gemma rounds its
            # factor to the weight's, and no tensor is made (nor copied to the GPU) in the graph.
            x = x * self.embed_scale
        if self.fused_norm is not None:
            x = fused_norm_blocks(self, x, cos, sin)
        else:
            for i, block in enumerate(self.blocks):
                x = block(x, *self.rope_of(i, cos, sin))
            x = self.norm(x)
        if targets is not None and self.kernels.cross_entropy == "chunked":
            # LM head + cross-entropy a chunk of tokens at a time (see tiny_llm.kernels).
            return chunked_cross_entropy(
                x.view(-1, x.shape[-1]), self.lm_head.weight, targets.view(-1), self.kernels.ce_chunk_tokens
            )
        if targets is not None and self.fused_loss is not None:
            return self.fused_loss(x.view(-1, x.shape[-1]), self.lm_head.weight, targets.view(-1))
        logits = self.lm_head(x)  # BF16 under autocast
        if targets is None:
            return logits
        # The upcast is written out so that, compiled, inductor fuses it into the
        # log-softmax reductions: the (B·T, vocab) FP32 logits are never stored.
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def build_model(
    cfg: ModelConfig, device: str | torch.device = "cpu", seed: int = 42, kernels: Kernels = Kernels()
) -> Transformer:
    """A model whose weights depend only on `seed` (initialised on `device`); `kernels` never changes them."""
    device = torch.device(device)
    if device.type != "meta":
        torch.manual_seed(seed)
    with device:
        return Transformer(cfg, kernels)
