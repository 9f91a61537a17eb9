"""On the GPU (H200), the production update against transformers: BF16, compiled, inside the
captured CUDA graph, the first update's loss on transformers' weights equals transformers' own
loss on the same weights and batch, for both Gemma 3 presets, OLMo 2 1B, SmolLM2-135M, Qwen3-0.6B and SmolLM3-3B
(at context 1024, twice Gemma's 512-token window, so the windowed layers' kernel is the one
that skips what the window leaves out).

The weights are transformers' initialisation perturbed (so the loss is far from ln(vocab),
which any model of random weights gives), loaded in place into the built model's arena
(`tiny_llm.hf_weights.load_transformers`) after the graph was captured; one replay then runs
the update on them. Skipped without CUDA. Run with: pytest packages/tiny-llm/tests -m cuda
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from throughput_schema.recipe import load_recipe
from tiny_llm.hf_weights import load_transformers, transformers_model

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[3]
CUDA = torch.device("cuda")
BF16_RTOL = 2**-8  # one BF16 rounding step, relative


# SmolLM3-3B's FP32 weights, AdamW state and transformers' FP32 copy need an H200's memory.
BIG = {"smollm3-3b": 120 * 2**30}


@pytest.mark.parametrize(
    "preset", ["gemma-3-270m", "gemma-3-1b", "olmo-2-1b", "smollm2-135m", "qwen3-0.6b", "smollm3-3b"]
)
def test_first_captured_update_loss_equals_transformers(preset):
    from tiny_llm.update import build

    if torch.cuda.get_device_properties(CUDA).total_memory < BIG.get(preset, 0):
        pytest.skip(f"{preset} needs {BIG[preset] / 2**30:.0f} GiB of GPU memory (an H200)")

    context, batch = 1024, 4
    recipe = load_recipe(
        ROOT / "configs" / f"{preset}.yaml",
        [f"model.context_length={context}", f"training.micro_batch_size={batch}",
         f"training.batch_tokens={context * batch}"],
    )  # fmt: skip
    built = build(recipe, CUDA)  # compiled, setup updates run, the update captured
    assert built.backend == "cuda-graph"
    torch.manual_seed(0)
    with CUDA:
        hf = transformers_model(recipe.model).float()
    gen = torch.Generator(device=CUDA).manual_seed(1)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen, device=CUDA))
    load_transformers(built.model, hf.state_dict())
    built.run()  # the first update on transformers' weights: one graph replay
    loss = built.update.loss.item()

    inputs, targets = built.update.source_inputs, built.update.source_targets
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        logits = hf(input_ids=inputs).logits
        want = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1)).item()
    print(f"{preset}: captured update loss {loss:.5f}, transformers {want:.5f}, ln(vocab) "
          f"{math.log(recipe.model.vocab_size):.5f}")  # fmt: skip
    assert math.isfinite(loss) and abs(loss - want) <= BF16_RTOL * want, (loss, want)
    # The loss depends on these weights (random weights give about ln(vocab)), so landing within a
    # BF16 step of it is no accident. On the H200 SmolLM2-135M's was 0.83 from ln(vocab), 18 steps.
    assert abs(want - math.log(recipe.model.vocab_size)) > 10 * BF16_RTOL * want, want
