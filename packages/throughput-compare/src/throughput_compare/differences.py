"""Every way two campaigns differ outside their measurements: hardware, protocol,
recipe, kernel variants and frozen sources. Protocol and recipe differences refuse
the comparison (a changed measurement is not a changed machine) unless allowed."""

from __future__ import annotations

from typing import Any

import msgspec

from throughput_compare.inputs import Campaign
from throughput_compare.precision import PROTOCOL_KEY, RECIPE_KEY, precision_difference
from throughput_schema.comparison import Difference
from throughput_schema.provenance import HARDWARE_COLUMNS as HARDWARE_FIELDS

# A recipe's fields that say which point it is, not how it is trained.
POINT_FIELDS = frozenset({"model.context_length", "training.micro_batch_size", "training.batch_tokens"})


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(_flat(inner, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def _values(campaign: Campaign, pick) -> str:
    found = sorted({str(pick(p)) for p in campaign.points.values()})
    return ", ".join(found) if found else "(no measured point)"


def _hardware(a: Campaign, b: Campaign) -> list[Difference]:
    out = []
    for name in HARDWARE_FIELDS:
        va = _values(a, lambda p, name=name: getattr(p.result.hardware, name) or "(not recorded)")
        vb = _values(b, lambda p, name=name: getattr(p.result.hardware, name) or "(not recorded)")
        if va != vb:
            out.append(Difference(area="hardware", field=name, a=va, b=vb))
    return out


# Kernel fields that results from before them lack, and the value such a result ran with
# (`swiglu` was recorded only when not "default" until the Triton SwiGLU became the default
# on CUDA; results since record it always, resolved; `norm` and `rope` came later).
KERNEL_FIELD_DEFAULTS = {"swiglu": "default", "norm": "default", "rope": "default"}
# Recorded values that name what ran under another name since: `attention` "auto" was recorded
# unresolved until "auto" could pick FlashAttention-4, and then it was PyTorch's SDPA choice.
KERNEL_VALUE_ALIASES = {("attention", "auto"): "sdpa"}


def _kernels(a: Campaign, b: Campaign) -> list[Difference]:
    def pick(p):
        kernels = dict(p.result.kernels)
        if kernels:  # an empty record (from before kernels were recorded) reads "default"
            kernels = {**KERNEL_FIELD_DEFAULTS, **kernels}
            kernels = {k: KERNEL_VALUE_ALIASES.get((k, v), v) for k, v in kernels.items()}
        return ", ".join(f"{k}={v}" for k, v in sorted(kernels.items())) or "default"

    va, vb = _values(a, pick), _values(b, pick)
    return [] if va == vb else [Difference(area="kernels", field="kernels", a=va, b=vb)]


def _protocol(a: Campaign, b: Campaign) -> list[Difference]:
    pa = _flat(msgspec.to_builtins(a.manifest.protocol))
    pb = _flat(msgspec.to_builtins(b.manifest.protocol))
    return [
        Difference(area="protocol", field=key, a=str(pa.get(key)), b=str(pb.get(key)), refuses=True)
        for key in sorted(set(pa) | set(pb))
        if pa.get(key) != pb.get(key) and key != PROTOCOL_KEY
    ]


def _recipes(campaign: Campaign) -> dict[str, dict[str, Any]]:
    """Per model, the recipe fields of its measured points, point fields left out."""
    out: dict[str, dict[str, set]] = {}
    for point in campaign.points.values():
        flat = _flat(msgspec.to_builtins(point.result.recipe))
        fields = out.setdefault(point.result.recipe.name, {})
        for key, value in flat.items():
            if key not in POINT_FIELDS and key != "schema_version":
                fields.setdefault(key, set()).add(str(value))
    return {m: {k: ", ".join(sorted(v)) for k, v in f.items()} for m, f in out.items()}


def _recipe(a: Campaign, b: Campaign) -> list[Difference]:
    ra, rb = _recipes(a), _recipes(b)
    out = []
    for model in sorted(set(ra) & set(rb)):
        fa, fb = ra[model], rb[model]
        for key in sorted(set(fa) | set(fb)):
            if fa.get(key) != fb.get(key) and key != RECIPE_KEY:
                out.append(
                    Difference(
                        area="recipe",
                        field=f"{model}: {key}",
                        a=fa.get(key, "(absent)"),
                        b=fb.get(key, "(absent)"),
                        refuses=True,
                    )
                )
    return out


def _frozen(a: Campaign, b: Campaign) -> list[Difference]:
    fa = {f.path: f.sha256 for f in a.manifest.frozen_files}
    fb = {f.path: f.sha256 for f in b.manifest.frozen_files}
    return [
        Difference(area="frozen", field=path, a=fa.get(path, "(absent)")[:12], b=fb.get(path, "(absent)")[:12])
        for path in sorted(set(fa) | set(fb))
        if fa.get(path) != fb.get(path)
    ]


def differences(a: Campaign, b: Campaign) -> list[Difference]:
    return [
        *_hardware(a, b),
        *_kernels(a, b),
        *precision_difference(a, b),
        *_protocol(a, b),
        *_recipe(a, b),
        *_frozen(a, b),
    ]
