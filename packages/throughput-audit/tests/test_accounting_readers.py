"""A campaign's scheduler must have an accounting reader in the audit, or the audit refuses it."""

from __future__ import annotations

import pytest

from campaign_builder.auditing import edit
from throughput_audit import cli
from throughput_audit.accounting_readers import READERS
from throughput_audit.audit import run_audit
from throughput_schema import scheduler_names
from throughput_schema.layout import MANIFEST
from throughput_schema.scheduler_names import UnknownScheduler


@pytest.fixture
def pbs_without_reader(monkeypatch):
    """A scheduler name listed in the schema with no accounting reader in the audit."""
    monkeypatch.setattr(scheduler_names, "SCHEDULER_NAMES", (*scheduler_names.SCHEDULER_NAMES, "pbs"))


def _on_pbs(campaign) -> None:
    edit(campaign.root / MANIFEST, lambda d: d["profile"].update(scheduler="pbs"))


def test_every_scheduler_has_an_accounting_reader():
    READERS.check()


def test_cli_refuses_a_scheduler_without_a_reader_in_one_line(campaign, pbs_without_reader, capsys):
    _on_pbs(campaign)
    assert cli.main(["--output", str(campaign.root)]) == 2
    err = capsys.readouterr().err
    assert err == "throughput-audit: scheduler 'pbs' has no accounting reader in the audit\n"
    assert not (campaign.root / "audit.json").exists()


def test_a_campaign_on_a_scheduler_without_a_reader_is_refused(campaign, pbs_without_reader):
    _on_pbs(campaign)
    with pytest.raises(UnknownScheduler, match="scheduler 'pbs' has no accounting reader in the audit"):
        run_audit(campaign.root)


def test_a_campaign_on_an_unlisted_scheduler_is_refused_in_one_line(campaign, capsys):
    _on_pbs(campaign)
    assert cli.main(["--output", str(campaign.root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "scheduler 'pbs' is not one of: slurm, local" in err
