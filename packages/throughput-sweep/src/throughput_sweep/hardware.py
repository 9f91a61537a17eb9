"""Which hardware and software measured a campaign's points, for collect's tables and README."""

from __future__ import annotations

from throughput_schema.provenance import HARDWARE_COLUMNS, HARDWARE_LABELS, hardware_mix, hardware_of, hardware_value
from throughput_sweep.attempt_status import AttemptInfo


def measured_hardware(info: AttemptInfo):
    return hardware_of(info.measured)


def hardware_section(infos: list[AttemptInfo]) -> list[str]:
    """The README's hardware: one row per distinct GPU and software set with its points,
    and a warning when the points ran on more than one."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for i in infos:
        hardware = measured_hardware(i)
        if hardware is not None:
            key = tuple(hardware_value(hardware, c) or "-" for c in HARDWARE_COLUMNS)
            groups.setdefault(key, []).append(f"{i.attempt.curve} b{i.batch}")
    out = ["## Hardware\n"]
    mixed = hardware_mix(map(measured_hardware, infos))
    if mixed:
        out.append(f"**MIXED HARDWARE**: {mixed}; these figures are not comparable across those points.\n")
    if not groups:
        return out + ["No measured points yet.\n"]
    out.append(f"| {' | '.join(HARDWARE_LABELS.values())} | points |")
    out.append("|---" * (len(HARDWARE_LABELS) + 1) + "|")
    for key, points in groups.items():
        # One set for the whole campaign is the usual case; the CSV still names it per point.
        where = f"all {len(points)} measured points" if len(groups) == 1 else ", ".join(points)
        out.append(f"| {' | '.join(key)} | {where} |")
    return out + [""]
