"""A campaign's frozen profile: the refusals it causes, what to tell the user, and its
replacement by `run --resume --profile FIXED` while nothing of the campaign has run.

A campaign freezes its cluster profile in the manifest at creation, so every point of a
curve runs with the same account, partition and resources. A refusal that comes from the
profile itself (a wrong account, partition or QOS, a time limit or resources the cluster
does not offer: its backend's `refusal_fields`) then repeats for every
submission: `--retry-failed` would only fail again.
The advice is to fix the profile and start a new `--output`. While no job of the campaign
was ever accepted (every submission refused), nothing ran under the old profile, so
`--resume --profile FIXED` may replace it instead; the manifest records each replacement
(`Manifest.profile_replacements`). Once a job has been accepted, a different profile
would mix two settings in one campaign, and is refused.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import msgspec

from throughput_schema import ClusterProfile, write_atomic
from throughput_schema.campaigns import ProfileReplacement
from throughput_schema.digests import sha256_bytes
from throughput_schema.layout import MANIFEST
from throughput_sweep.attempt_status import AttemptInfo
from throughput_sweep.campaign import Campaign, CampaignError, now
from throughput_sweep.curves import Curve, last_failure
from throughput_sweep.locking import CampaignLock
from throughput_sweep.schedulers import backend


def profile_refused(curve: Curve, scheduler: str) -> str:
    """The profile fields to fix when `curve` is blocked by a refusal of `scheduler`'s that comes from its profile."""
    last = last_failure(curve)
    if curve.state != "blocked" or last is None or last.status not in ("refused", "failed"):
        return ""
    return backend(scheduler).refusal_fields(last.message)


def nothing_ran(infos: list[AttemptInfo]) -> bool:
    """No job of the campaign was ever accepted: every submission was refused or never made.
    An unsettled or ambiguous intent may hide an accepted job, so it counts as run."""
    return all(i.status in ("refused", "abandoned") for i in infos)


def refusal_advice(campaign: Campaign, curves: list[Curve], driver: str) -> str:
    """What to do about curves blocked by their profile, in one line ('' when none is)."""
    fields = sorted({f for c in curves if (f := profile_refused(c, campaign.manifest.profile.scheduler))})
    if not fields:
        return ""
    name = campaign.manifest.profile.name
    where = shlex.quote(str(campaign.root))
    line = (
        f"the cluster refused the campaign's frozen profile {name!r} (check its {'; '.join(fields)}); "
        f"retrying with the same profile can only fail again: fix the profile and start a new campaign "
        f"(choose a new --output)"
    )
    if nothing_ran(campaign.infos()):
        line += (
            f", or, since nothing of this campaign has run yet: {driver} run --output {where} --resume --profile FIXED"
        )
    return line


def blocked_advice(campaign: Campaign, curves: list[Curve], driver: str) -> str:
    """What to do about blocked curves, in one line: the profile's fix, else the retry command."""
    advice = refusal_advice(campaign, curves, driver)
    if advice:
        return advice
    blocked = ", ".join(c.name for c in curves if c.state == "blocked")
    return (
        f"blocked curves: {blocked}; investigate their failures, "
        f"then retry with: {driver} run --output {shlex.quote(str(campaign.root))} --resume --retry-failed"
    )


def profile_sha256(profile: ClusterProfile) -> str:
    return sha256_bytes(msgspec.json.encode(profile))


def _frozen(campaign: Campaign) -> str:
    return f"{campaign.root}: this campaign froze its profile {campaign.manifest.profile.name!r} when it was created"


def refuse_other_profile(campaign: Campaign, spec: str | None) -> None:
    """`--resume --profile SPEC` naming another profile, once a job of the campaign may have run."""
    if spec and spec != campaign.manifest.profile.name and not nothing_ran(campaign.infos()):
        raise CampaignError(
            f"{_frozen(campaign)} and jobs have been submitted under it; another profile needs a new campaign "
            "(choose a new --output)"
        )


def resume_profile(campaign: Campaign, spec: str | None, root: Path, *, write: bool) -> tuple[Campaign, bool]:
    """`--resume --profile SPEC`: the campaign as it runs on, and whether its profile was replaced.

    Once a job ran, naming the frozen profile keeps it as frozen, and another is refused.
    While nothing ran, the profile SPEC names replaces the frozen one where they differ
    (a profile of the frozen name edited in place since, too), on the same scheduler (the
    intents name it); the manifest is rewritten under the campaign's lock unless `write` is
    False (a dry run).
    """
    from throughput_sweep.profiles import load_profile

    m = campaign.manifest
    same_name = spec == m.profile.name
    if not spec or (same_name and not nothing_ran(campaign.infos())):
        return campaign, False
    refuse_other_profile(campaign, spec)
    frozen = _frozen(campaign)
    try:
        new = load_profile(spec, root, need_python=write)
    except CampaignError:
        if same_name:  # the frozen name without a file of that name (it came from a path): kept
            return campaign, False
        raise
    if new == m.profile:
        return campaign, False
    if new.scheduler != m.profile.scheduler:
        raise CampaignError(
            f"{frozen} for the {m.profile.scheduler} scheduler; --profile {spec} uses {new.scheduler}, which needs a new "
            "campaign (choose a new --output)"
        )
    replacement = ProfileReplacement(
        replaced_at=now(),
        old=m.profile,
        old_sha256=profile_sha256(m.profile),
        new_name=new.name,
        new_sha256=profile_sha256(new),
    )
    manifest = msgspec.structs.replace(m, profile=new, profile_replacements=[*m.profile_replacements, replacement])
    replaced = Campaign(root=campaign.root, manifest=manifest)
    if write:
        with CampaignLock(campaign.root):  # no watcher runs this campaign meanwhile
            if not nothing_ran(campaign.infos()):  # checked again under the lock
                raise CampaignError(f"{frozen} and a job was submitted meanwhile; another profile needs a new campaign")
            write_atomic(campaign.root / MANIFEST, manifest)
    return replaced, True
