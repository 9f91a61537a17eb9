"""The decoder's weight tensors and the parameter count the report checks results against.

The table has one home, `throughput_schema.shape` (the names and shapes of every trainable
tensor for every knob a recipe turns). The independent checks of it are elsewhere: the
worker records the parameter count of the model it really built and refuses a model that
differs from the table, and the audit derives the count again by its own route.
"""

from __future__ import annotations

from throughput_schema.shape import parameter_count as count_parameters
from throughput_schema.shape import weight_shapes as weight_shapes

__all__ = ["count_parameters", "weight_shapes"]
