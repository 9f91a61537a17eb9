"""Campaigns written on disk from schema records, for the tests of every package.

`files` lays an attempt's records out under the campaign layout; `complete` builds
campaigns with everything the audit checks (frozen files, intents, job scripts,
receipts with Slurm accounting) from the worker results of `results`; `fake_sacct` answers
the audit's sacct queries from the rows a builder laid out; `gpu` builds throughput + optimizer-timing pairs whose
figures come from a pretend GPU, for the report; `planting`, `faults` and `campaign_faults`
plant the audit's faults in finished campaigns. Nothing here is shipped.
"""
