"""The complete update, and building everything it needs from a recipe.

One update = copy the fixed inputs into the static inputs (device to device),
zero the gradient arena, BF16-autocast forward and cross-entropy, backward,
ArenaAdamW.step (clip + AdamW + counters). There is no gradient accumulation: the
micro-batch is the optimizer batch. On CUDA the model is `torch.compile`d and the
whole update is captured as one CUDA graph (see `graph.py`); on CPU the same
update runs eagerly (backend "cpu-eager"), so CI exercises the same logic. A CPU
without native BF16 matrix units runs it in FP32 (backend "cpu-eager-fp32",
`autocast_dtype`). An FP8 precision (`training.precision`) swaps the chosen linears for
torchao's (`tiny_llm.fp8`) before anything else sees the model.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from throughput_schema import Fp8Linears, Recipe
from throughput_schema.precision import is_fp8
from throughput_schema.recipe import parameter_count
from tiny_llm.arena_adamw import ArenaAdamW
from tiny_llm.arena_muon import ArenaMuon
from tiny_llm.hardware import autocast_dtype
from tiny_llm.kernels import Kernels
from tiny_llm.model import Transformer, build_model

PhaseHook = Callable[[str], None]


class ParameterCountMismatch(RuntimeError):
    """The built model's parameters are not the recipe's count: what would be measured is not
    the model the recipe (and every FLOP and MFU figure derived from it) describes."""

    def __init__(self, built: int, recipe: Recipe) -> None:
        self.built, self.expected = built, parameter_count(recipe.model)
        super().__init__(
            f"the built model has {built:,} parameters but recipe {recipe.name!r} counts {self.expected:,}; "
            "not measuring a model the recipe does not describe"
        )


def built_parameters(model: torch.nn.Module) -> int:
    """The parameters of a built model, a tied weight counted once (`parameters()` yields it once)."""
    return sum(p.numel() for p in model.parameters())


def make_inputs(recipe: Recipe, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens generated once on the device from the recipe's seed (42 in campaigns).

    The repeated synthetic batch measures speed, not learning; inputs and targets are
    the shifted halves of one (B, L+1) draw, as real next-token data would be.
    """
    t, m = recipe.training, recipe.model
    gen = torch.Generator(device=device)
    gen.manual_seed(t.seed)
    tokens = torch.randint(0, m.vocab_size, (t.micro_batch_size, m.context_length + 1), generator=gen, device=device)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def make_optimizer(model: Transformer, recipe: Recipe, kernel: str | None) -> ArenaAdamW | ArenaMuon:
    """The recipe's optimizer over the model: ArenaAdamW, or ArenaMuon (Muon beside an ArenaAdamW)."""
    o = recipe.optimizer
    if o.name == "muon":
        return ArenaMuon(model, o, max_norm=recipe.training.grad_clip, kernel=kernel)
    return ArenaAdamW(
        model,
        lr=o.lr,
        betas=(o.beta1, o.beta2),
        eps=o.eps,
        weight_decay=o.weight_decay,
        max_norm=recipe.training.grad_clip,
        kernel=kernel,
    )


class Update:
    """One complete update, callable eagerly or under CUDA-graph capture.

    `events`, when given, are three timing events recorded at the update's start,
    before `ArenaAdamW.step` and after it (optimizer timing): CUDA events, created with
    `external=True` when recorded inside a capture, or `HostEvent`s on the CPU.
    """

    def __init__(
        self,
        model_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        optimizer: ArenaAdamW | ArenaMuon,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        *,
        events: tuple | None = None,
    ) -> None:
        self.model_fn, self.optimizer, self.events = model_fn, optimizer, events
        self.source_inputs, self.source_targets = inputs, targets
        # Static inputs: fixed addresses a captured graph reads each replay.
        self.inputs, self.targets = torch.empty_like(inputs), torch.empty_like(targets)
        self.loss = torch.zeros((), device=inputs.device, dtype=torch.float32)
        self.device_type = inputs.device.type
        self.autocast = autocast_dtype(inputs.device)

    def __call__(self) -> None:
        if self.events:
            self.events[0].record()
        self.inputs.copy_(self.source_inputs, non_blocking=True)
        self.targets.copy_(self.source_targets, non_blocking=True)
        self.optimizer.zero_grad()
        with torch.autocast(self.device_type, dtype=self.autocast or torch.bfloat16, enabled=self.autocast is not None):
            loss = self.model_fn(self.inputs, self.targets)
        loss.backward()
        self.loss.copy_(loss.detach())
        if self.events:
            self.events[1].record()
        self.optimizer.step()
        if self.events:
            self.events[2].record()


class HostEvent:
    """The CPU's stand-in for a CUDA timing event, with the same two methods.

    Eager CPU work has finished when the next Python line runs, so the host clock read at
    the update's start, before `ArenaAdamW.step` and after it times the same spans that
    CUDA events recorded in the graph time on the GPU.
    """

    def __init__(self) -> None:
        self.at = 0.0

    def record(self) -> None:
        self.at = time.perf_counter()

    def elapsed_time(self, end: HostEvent) -> float:
        return (end.at - self.at) * 1000.0


@dataclass
class Built:
    recipe: Recipe
    device: torch.device
    model: Transformer
    optimizer: ArenaAdamW | ArenaMuon
    update: Update
    backend: str
    # One update as the timed production entrypoint runs it (graph replay on CUDA).
    run: Callable[[], None]
    # Updates already executed during setup (eager warm-up before capture).
    setup_updates: int = 0
    graph: object | None = None
    notes: dict = field(default_factory=dict)
    kernels: Kernels = Kernels()  # as requested ("auto" where left to the device)
    parameters: int = 0  # the built model's (`built_parameters`), equal to the recipe's count
    fp8: Fp8Linears | None = None  # an FP8 precision's linears

    def ran(self) -> Kernels:
        """`kernels` with "auto" resolved: the model's own (`resolve_kernels`), with the
        optimizer kernel the arena picked for the arenas it holds."""
        return replace(self.model.kernels, optimizer=self.optimizer.kernel)


def build(
    recipe: Recipe,
    device: torch.device,
    *,
    timing_events: bool = False,
    compile_model: bool | None = None,
    use_graph: bool | None = None,
    compile_mode: str | None = None,
    kernels: Kernels = Kernels(),
    on_phase: PhaseHook = lambda phase: None,
    fp8_emulate: bool = False,
    before_compile: Callable[[Kernels], None] | None = None,
) -> Built:
    """Model, arena, inputs, compile and capture. Phases are announced through `on_phase`.

    `kernels` picks the speed variants (default `Kernels()`: the Triton optimizer and SwiGLU
    on CUDA, resolved from "auto" by ArenaAdamW and the model; `optimizer.kernel` and
    `model.kernels.swiglu` say what runs); `compile_mode`, when given, overrides
    `kernels.compile_mode`. `fp8_emulate` (tests only) runs an FP8 precision through torchao's
    emulation, which is what lets the CPU build one; without it an FP8 precision needs a GPU
    with FP8 matrix units and torchao (`tiny_llm.fp8.Fp8Unavailable` otherwise).
    `before_compile`, where the model is compiled, is called with the kernels as they will run
    (`Built.ran`) before anything compiles: the compile cache loads its artifact there.
    """
    if compile_mode is not None:
        kernels = replace(kernels, compile_mode=compile_mode)
    cuda = device.type == "cuda"
    compile_model = cuda if compile_model is None else compile_model
    use_graph = cuda if use_graph is None else use_graph
    on_phase("setup")
    model = build_model(recipe.model, device, seed=recipe.training.seed, kernels=kernels)
    parameters = built_parameters(model)
    if parameters != parameter_count(recipe.model):
        raise ParameterCountMismatch(parameters, recipe)
    fp8 = _fp8_linears(model, recipe.training.precision, device, emulate=fp8_emulate)
    optimizer = make_optimizer(model, recipe, None if kernels.optimizer == "auto" else kernels.optimizer)
    inputs, targets = make_inputs(recipe, device)
    if compile_model and before_compile is not None:
        before_compile(replace(model.kernels, optimizer=optimizer.kernel))
    model_fn = torch.compile(model, **kernels.compile_kwargs()) if compile_model else model
    events: tuple | None = None
    if timing_events and use_graph:
        events = tuple(torch.cuda.Event(enable_timing=True, external=True) for _ in range(3))
    elif timing_events and cuda:
        events = tuple(torch.cuda.Event(enable_timing=True) for _ in range(3))
    elif timing_events:
        events = tuple(HostEvent() for _ in range(3))
    update = Update(model_fn, optimizer, inputs, targets, events=events)
    if cuda:
        backend = "cuda-graph" if use_graph else "cuda-compiled" if compile_model else "cuda-eager"
    else:
        backend = "cpu-eager" if update.autocast is not None else "cpu-eager-fp32"
    built = Built(
        recipe, device, model, optimizer, update, backend, run=update, kernels=kernels, parameters=parameters, fp8=fp8
    )
    if use_graph:
        from tiny_llm.graph import capture_update

        graph, built.setup_updates = capture_update(update, on_phase=on_phase)
        built.graph, built.run = graph, graph.replay
    elif compile_model:
        on_phase("compile")
        update()  # the first call compiles forward and backward
        built.setup_updates = 1
    optimizer.check_views()
    return built


def _fp8_linears(model: Transformer, precision: str, device: torch.device, *, emulate: bool) -> Fp8Linears | None:
    """Convert the model's linears for an FP8 precision (None at BF16); raises Fp8Unavailable
    where this node cannot run it."""
    if not is_fp8(precision):
        return None
    from tiny_llm import fp8

    refusal = None if emulate else fp8.unavailable(precision, device)
    if refusal is not None:
        raise refusal
    return fp8.convert(model, precision, emulate=emulate)
