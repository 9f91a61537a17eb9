"""Slurm's text for throughput campaigns, read into the schema's neutral records.

`sacct` asks sacct and reads its rows, durations, TRES lists and query windows, and reads
a row into the project's `JobAccounting`; `environment` is the environment every Slurm
command of the tool runs in; `version_one` reads the sacct rows that schema version 1
stored, for `throughput-schema upgrade`. The sweep's Slurm backend and the audit's Slurm
reader both read Slurm's text here, so both read it the same way.
"""

__version__ = "0.1.0"
