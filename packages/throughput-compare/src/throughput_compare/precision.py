"""A precision difference between two campaigns (BF16 against FP8): the point of such a
comparison, so it is accepted by name, never as a protocol change, and said at the top."""

from __future__ import annotations

from throughput_compare.inputs import Campaign
from throughput_schema.comparison import Comparison, Difference
from throughput_schema.precision import mfu_label

# Where the precision shows up among the settings `differences` compares; a precision
# difference there is this module's, not a refusing protocol or recipe difference.
PROTOCOL_KEY = "precision"
RECIPE_KEY = "training.precision"


def precision_difference(a: Campaign, b: Campaign) -> list[Difference]:
    pa, pb = a.manifest.protocol.precision, b.manifest.protocol.precision
    return [] if pa == pb else [Difference(area="precision", field="precision", a=pa, b=pb)]


def precision_line(c: Comparison) -> str:
    """The line at the top of a comparison across precisions, "" for one at the same precision."""
    found = next((d for d in c.differences if d.area == "precision"), None)
    if found is None:
        return ""
    return (
        f"Precision comparison: A {found.a}, B {found.b} (accepted by name): each ratio is what B's "
        f"precision changes, with its uncertainty against the noise threshold; MFU is one definition "
        f"({mfu_label(found.b)} for B: the same FLOPs over the dense BF16 peak)."
    )
