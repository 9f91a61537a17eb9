"""The environment of every Slurm command: the shell's, less SBATCH_*/SLURM_* and the query
commands' option variables, with SLURM_TIME_FORMAT=standard."""

from throughput_schema.slurm_env import slurm_environment


def test_job_changing_and_allocation_variables_are_removed_and_reported():
    env, removed = slurm_environment(
        {
            "HOME": "/home/u",
            "PATH": "/usr/bin",
            "SLURM_CONF": "/etc/slurm/x.conf",
            "SBATCH_TIMELIMIT": "00:01:00",
            "SBATCH_EXCLUSIVE": "1",
            "SBATCH_WAIT": "1",
            "SLURM_JOB_ID": "7",
            "SLURM_CPUS_ON_NODE": "2",
            "SLURM_CLUSTERS": "other",
            "SLURM_TIME_FORMAT": "relative",
            "SQUEUE_FORMAT": "%i",
            "SACCT_FEDERATION": "1",
            "SCANCEL_INTERACTIVE": "1",
            "SLURMD_NODENAME": "n1",
        }
    )
    assert env == {
        "HOME": "/home/u",
        "PATH": "/usr/bin",
        "SLURM_CONF": "/etc/slurm/x.conf",
        "SLURMD_NODENAME": "n1",
        "SLURM_TIME_FORMAT": "standard",
    }
    assert list(removed) == sorted(removed)
    assert removed == {
        "SACCT_FEDERATION": "1",
        "SBATCH_EXCLUSIVE": "1",
        "SBATCH_TIMELIMIT": "00:01:00",
        "SBATCH_WAIT": "1",
        "SCANCEL_INTERACTIVE": "1",
        "SLURM_CLUSTERS": "other",
        "SLURM_CPUS_ON_NODE": "2",
        "SLURM_JOB_ID": "7",
        "SLURM_TIME_FORMAT": "relative",
        "SQUEUE_FORMAT": "%i",
    }


def test_a_clean_shell_loses_nothing():
    env, removed = slurm_environment({"PATH": "/usr/bin", "SLURM_TIME_FORMAT": "standard"})
    assert env == {"PATH": "/usr/bin", "SLURM_TIME_FORMAT": "standard"} and removed == {}


def test_the_users_jwt_token_is_kept_and_never_recorded():
    env, removed = slurm_environment({"SLURM_JWT": "secret", "SBATCH_QOS": "nosuch"})
    assert env["SLURM_JWT"] == "secret" and removed == {"SBATCH_QOS": "nosuch"}
