"""A precision difference between two campaigns (BF16 against FP8): the point of such a
comparison, so it is accepted by name, never as a protocol change, and said at the top."""

from __future__ import annotations

from throughput_compare.inputs import Campaign
from throughput_schema.comparison import Comparison, Difference
from throughput_schema.precision import is_fp8, mfu_label

# Where the precision shows up among the settings `differences` compares; a precision
# difference there is this module's, not a refusing protocol or recipe difference.
PROTOCOL_KEY = "precision"
RECIPE_KEY = "training.precision"


def precision_difference(a: Campaign, b: Campaign) -> list[Difference]:
    pa, pb = a.manifest.protocol.precision, b.manifest.protocol.precision
    return [] if pa == pb else [Difference(area="precision", field="precision", a=pa, b=pb)]


def without_fp8_linears(a: Campaign, b: Campaign) -> list[str]:
    """The points of an FP8 campaign at which the filter converted no linear, as "B: curve bN"."""
    found = []
    for side, campaign in (("A", a), ("B", b)):
        if not is_fp8(campaign.manifest.protocol.precision):
            continue
        for (curve, batch), measured in sorted(campaign.points.items()):
            fp8 = measured.result.fp8
            if fp8 is not None and not fp8.converted:
                found.append(f"{side}: {curve} b{batch}")
    return found


def precision_line(c: Comparison) -> str:
    """The line at the top of a comparison across precisions, "" for one at the same precision."""
    found = next((d for d in c.differences if d.area == "precision"), None)
    if found is None:
        return ""
    line = (
        f"Precision comparison: A {found.a}, B {found.b} (accepted by name): each ratio is what B's "
        f"precision changes, with its uncertainty against the noise threshold; MFU is one definition "
        f"({mfu_label(found.b)} for B: the same FLOPs over the dense BF16 peak)."
    )
    if c.no_fp8_linears:
        shown = ", ".join(c.no_fp8_linears[:6]) + (", ..." if len(c.no_fp8_linears) > 6 else "")
        line += (
            f" No linear ran in FP8 at {len(c.no_fp8_linears)} point(s) ({shown}): the layer filter kept "
            f"every linear in BF16 there, so those ratios compare BF16 with BF16."
        )
    return line
