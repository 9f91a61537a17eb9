"""Speed variants of the update, each numerically faithful to the default.

`Kernels()` is the default behaviour. A variant becomes a default only after a GPU
measurement (`benchmarks/variants.py`) shows it faster and equal within BF16 tolerance at
every point measured; the kernels a default replaced stay selectable, so the old behaviour
can be measured again. The figures behind each choice are in docs/performance.md. The worker
records `Kernels.record()` in its result (`WorkerResult.kernels`), with the "auto" choices
(`attention`, `optimizer`, `swiglu`, `rope`) resolved to the kernel that ran, so every figure
says how it was produced.

- `attention`: which attention kernel runs. "auto" (the default, resolved by
  `tiny_llm.fa4_attention.resolve_attention`, through
  `tiny_llm.kernel_registry.resolve_kernels`) is "fa4" on a Hopper GPU where the
  `tiny-llm[fa4]` extra imports, for contexts of at least `FA4_MIN_CONTEXT` (512), else "sdpa";
  results record the resolved name, and a result's "auto" from before "fa4" existed means
  "sdpa". "sdpa" lets PyTorch choose among its SDPA kernels (cuDNN on Hopper in torch 2.11).
  "flash", "cudnn", "efficient" and "math" pin one SDPA backend with
  `torch.nn.attention.sdpa_kernel`, which torch.compile traces (dynamo records the backend
  switch in the graph, so the compiled forward and backward use the pinned kernel and the
  CUDA graph replays it). "fa4" is FlashAttention-4's Hopper kernels (`tiny_llm.fa4_attention`)
  as custom ops the compiled graph and the CUDA graph keep: q, k and v stay in the projection's
  (B, T, H, D) layout, RoPE and the q/k norm are applied there, and k, v with fewer heads are
  read as they are. A windowed layer (Gemma 3's sliding windows) runs FA4 with its window, which
  skips the blocks outside it; SDPA has no window, so there it is an explicit mask over the
  whole causal square (`tiny_llm.model.Attention.sdpa`): the same result, none of the saving.
- `cross_entropy`: "default" is `F.cross_entropy` over the whole (B·L, vocab) logits;
  "chunked" is `tiny_llm.cross_entropy.chunked_cross_entropy`: the LM head and cross-entropy fused over
  chunks of tokens, with the gradients computed in the forward, so the full logits
  (and their gradient) never exist at once; "triton" is
  `tiny_llm.triton_cross_entropy.linear_cross_entropy`: the loss and the logits' gradient in
  one Triton pass over the BF16 logits (no FP32 copy), the LM head's products on cuBLAS. Not
  a default: its gain was within the run's own noise.
- `swiglu`: "auto" (the default) is "triton" on CUDA where triton imports, else
  "default" (`tiny_llm.kernel_registry.resolve_swiglu`); "default" is `silu(gate) * up` as inductor
  fuses it; "triton" is `tiny_llm.triton_swiglu`: forward and backward each one Triton pass
  over gate_up.
- `norm`: "default" is `x + f(norm(x))` per sublayer as inductor fuses it; "triton" is
  `tiny_llm.triton_norm`: each residual add, the RMSNorm after it and the cast to the autocast
  dtype in one Triton pass forward and one backward (the weight's gradient summed per program,
  no atomics), over the FP32 residual stream (`tiny_llm.model.fused_norm_blocks`). Not a
  default: its gain was within the noise, and it lost at batch 1.
- `rope`: "auto" (the default) is "triton" where the attention resolves to "fa4" and the
  model's shape takes the kernel, else "default" (`tiny_llm.kernel_registry.resolve_rope`). "default" is
  the split of the QKV output (q/k norm, if any) and `apply_rope` as inductor fuses them;
  "triton" is `tiny_llm.triton_rope`: q and k rotated (and v copied) from the projection's
  output into dense (B, H, T, D) tensors in one pass, and d(qkv) written whole from dq, dk and
  dv in one pass; beside attention="fa4", q and k are written in FA4's (B, T, H, D) layout, v
  is read in place, and RoPE and attention are one pair of ops (`tiny_llm.fa4_attention`).
  Beside SDPA "auto" does not choose it: less kernel time there did not make the update
  measurably faster, nor was it shown equal within the repeat drift at every point.
  It reads the [q | k | v] projection with any number of kv heads (k and v rows for the first
  H_kv heads of each token) and rotates straight from it, so it is refused (`unsupported`) where
  a q/k norm comes first.
- `compile_mode`: torch.compile's mode (None: inductor's default), e.g.
  "max-autotune-no-cudagraphs" (we capture the graph ourselves).
- `inductor_tuning`: "coordinate-descent" turns on inductor's coordinate-descent
  tuning of its generated kernels (RMSNorm, RoPE, SwiGLU, casts).
- `optimizer`: ArenaAdamW's kernel ("auto": "triton" on CUDA with FP32 arenas where
  triton imports, else "fused" on CUDA, "tensor" on CPU; see `tiny_llm.arena_adamw`):
  "triton" is two Triton passes (`tiny_llm.triton_adamw`), "fused" is `torch._fused_adamw_`,
  "compiled" its step through inductor (slower than "fused", so opt-in).

Torch-free at import (the CLI's parser reads the choices without importing torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from throughput_schema import ModelConfig

ATTENTION = ("auto", "sdpa", "fa4", "flash", "cudnn", "efficient", "math")
CROSS_ENTROPY = ("default", "chunked", "triton")
SWIGLU = ("auto", "default", "triton")
NORM = ("default", "triton")
ROPE = ("auto", "default", "triton")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
INDUCTOR_TUNING = ("default", "coordinate-descent")
OPTIMIZER = ("auto", "tensor", "fused", "compiled", "triton")  # "auto" and tiny_llm.arena_adamw.KERNELS
# Tokens per chunk: 8192 x 32000 vocab is 0.5 GB of BF16 logits per chunk (1 GB as FP32),
# against 2 GB BF16 + 4 GB FP32 for the whole of 250m@2048x16 (32768 tokens).
CE_CHUNK_TOKENS = 8192


@dataclass(frozen=True)
class Kernels:
    attention: str = "auto"
    cross_entropy: str = "default"
    ce_chunk_tokens: int = CE_CHUNK_TOKENS
    swiglu: str = "auto"
    compile_mode: str | None = None
    inductor_tuning: str = "default"
    optimizer: str = "auto"
    norm: str = "default"
    rope: str = "auto"

    def __post_init__(self) -> None:
        for name, allowed in (
            ("attention", ATTENTION),
            ("cross_entropy", CROSS_ENTROPY),
            ("swiglu", SWIGLU),
            ("inductor_tuning", INDUCTOR_TUNING),
            ("optimizer", OPTIMIZER),
            ("norm", NORM),
            ("rope", ROPE),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if self.ce_chunk_tokens < 1:
            raise ValueError(f"ce_chunk_tokens must be >= 1, got {self.ce_chunk_tokens}")

    def record(self) -> dict[str, str]:
        """What the result file records: every field, as strings. The worker records them
        resolved (`attention`, `optimizer`, `swiglu` and `rope` as they ran, never "auto"); results from before
        the `swiglu`, `norm` or `rope` field lack it, which means "default"."""
        out = {
            "attention": self.attention,
            "cross_entropy": self.cross_entropy,
            "compile_mode": self.compile_mode or "default",
            "inductor_tuning": self.inductor_tuning,
            "optimizer": self.optimizer,
            "swiglu": self.swiglu,
            "norm": self.norm,
            "rope": self.rope,
        }
        if self.cross_entropy == "chunked":
            out["ce_chunk_tokens"] = str(self.ce_chunk_tokens)
        return out

    def sdpa_backends(self) -> list | None:
        """The backends `sdpa_kernel` allows, or None to leave PyTorch's choice alone."""
        if self.attention in ("auto", "sdpa", "fa4"):  # fa4 does not go through SDPA
            return None
        from torch.nn.attention import SDPBackend

        return [
            {
                "flash": SDPBackend.FLASH_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "math": SDPBackend.MATH,
            }[self.attention]
        ]

    def compile_kwargs(self) -> dict:
        """torch.compile keyword arguments (mode and options are exclusive there, so merge into options)."""
        mode = None if self.compile_mode in (None, "default") else self.compile_mode
        if self.inductor_tuning == "default":
            return {"mode": mode}
        from torch._inductor import list_mode_options

        options = dict(list_mode_options(mode)) if mode else {}
        options["coordinate_descent_tuning"] = True
        return {"options": options}


def unsupported(field: str, model: ModelConfig) -> str | None:
    """Why `Kernels(<field>="triton")` cannot build `model` (one line), or None where it can.

    The Triton cross-entropy reads the LM head's weight (tied or not), which no knob changes;
    the Triton SwiGLU gates with SiLU, so not a GeGLU (`mlp_activation`); the Triton norm fuses
    each residual add with the norm after it, so not where the norms are on the sublayers'
    outputs (`post_norm`, `sandwich_norm`) or scale by (1 + weight) (`norm_offset`); the RoPE kernel rotates q
    and k straight from the projection (any number of kv heads), so not where a q/k norm comes
    first, nor where some layers have no RoPE. No "auto" choice resolves to a refused kernel: RoPE's "auto" asks this first
    (`tiny_llm.kernel_registry.resolve_rope`) and SwiGLU's (`resolve_swiglu`), and the
    optimizer's takes every model.
    """
    if field == "swiglu" and model.mlp_activation != "silu":
        return (
            f"Kernels(swiglu='triton') cannot build this model (mlp_activation {model.mlp_activation}): "
            "its kernel gates with SiLU; use swiglu=default"
        )
    if field == "norm" and (model.post_norm or model.sandwich_norm or model.norm_offset):
        knob = "post_norm" if model.post_norm else "sandwich_norm" if model.sandwich_norm else "norm_offset"
        return (
            f"Kernels(norm='triton') cannot build this model ({knob}): its kernel norms the residual "
            "stream after each add with the weight as the gain, before each sublayer only; use norm=default"
        )
    if field != "rope":
        return None
    if model.qk_norm or model.qk_norm_whole:
        knob = "qk_norm" if model.qk_norm else "qk_norm_whole"
        return (
            f"Kernels(rope='triton') cannot build this model ({knob}): its kernel rotates q and k straight "
            "from the projection, where the q/k norm comes first; use rope=default"
        )
    if model.nope_layers:
        return (
            "Kernels(rope='triton') cannot build this model (nope_layers): its kernel rotates q and k in "
            "every layer, and these layers have no RoPE; use rope=default"
        )
    return None
