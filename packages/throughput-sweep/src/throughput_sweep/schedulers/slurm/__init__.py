"""The Slurm backend: everything that knows Slurm's commands and their text.

`backend` (`SlurmScheduler`: sbatch, squeue, sacct, scancel, scontrol) reads its commands'
output through `text` (squeue's and sbatch's lines in the interface's words), `reasons`
(sbatch's refusals and the pending reasons, classified) and `states` (Slurm's terminal
states and the outcome each implies, which the audit's Slurm reader holds results to).
Its preflight (`preflight`, asking the cluster in `cluster` and its allocation budgets in
`allocation_budget`) checks a profile before a campaign is created. This package imports
nothing of its backend here, so the audit can read `states` without the sweep's runtime.
"""
