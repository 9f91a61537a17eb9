"""Code that runs on the compute node, inside the job: the watchdog and the local job wrapper.

It runs from the campaign's frozen copy with the compute node's Python, which has the
schema (and its msgspec) but none of the controller's dependencies, so modules here import
only the standard library, msgspec, `throughput_schema` and each other
(`test_node_imports.py` holds them to that).
"""
