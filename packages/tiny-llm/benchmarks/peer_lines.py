"""peers.py's console: one line per point and precision, each case that ran with its ratios."""

from __future__ import annotations

PEERS = {"peer_a": "peer A", "peer_b": "peer B", "peer_muon": "peer Muon"}


def fmt(c: dict | None) -> str:
    if not c:
        return "-"
    if not c.get("ok"):
        return f"FAILED ({c['error'][:80]})"
    mfu = f" {c['mfu']:.1%}" if "mfu" in c else ""
    return f"{c['tokens_per_second']:,.0f} tok/s{mfu}"


def ok(c: dict | None) -> bool:
    return bool(c and c.get("ok"))


def vs_peer(p: dict, ours: dict | None, name: str, peer: dict | None) -> str:
    """Ours over the peer, and both optimizer steps against the floor, where both ran."""
    if not (ok(ours) and ok(peer)):
        return ""
    assert ours is not None and peer is not None
    floor = p["optimizer_floor_ms"]
    return (
        f" | ours/{name} {ours['tokens_per_second'] / peer['tokens_per_second']:.3f}x"
        f" | optimizer ours {ours['optimizer_ms']:.2f} ms, {name} {peer['optimizer_ms']:.2f} ms, "
        f"floor {floor:.2f} ms ({ours['optimizer_ms'] / floor:.2f}x)"
    )


def print_optimizer_kernels(p: dict) -> None:
    for name, c in p.get("optimizer_kernels", {}).items():
        if c["ok"]:
            vs = f", {c['vs_fused']:.3f}x fused" if "vs_fused" in c else ""
            print(
                f"{p['point']:>14}: ArenaAdamW.step {name:>13} {c['ms']:.3f} ms = {c['vs_floor']:.2f}x its floor "
                f"of {p['optimizer_floor_ms']:.3f} ms{vs}",
                flush=True,
            )
        else:
            print(f"{p['point']:>14}: ArenaAdamW.step {name:>13} FAILED ({c['error'][:120]})", flush=True)


def print_point(p: dict) -> None:
    print_optimizer_kernels(p)
    ours = p.get("ours")
    ran = [k for k in PEERS if k in p]
    if ours or ran:
        line = f"{p['point']:>14}: ours {fmt(ours)}" + "".join(f" | {PEERS[k]} {fmt(p[k])}" for k in ran)
        line += "".join(vs_peer(p, ours, PEERS[k], p[k]) for k in ran if k != "peer_b")
        if ok(ours):
            assert ours is not None
            line += f" | setup {ours['setup_seconds']:.1f} s"
        print(line, flush=True)
    for precision in dict.fromkeys(k.split("@", 1)[1] for k in p if "@" in k):
        mine, theirs = p.get(f"ours@{precision}"), p.get(f"peer_a@{precision}")
        line = f"{p['point']:>14}: {precision}: ours {fmt(mine)} | peer A {fmt(theirs)}"
        if ok(mine) and ok(ours):
            assert mine is not None and ours is not None
            line += f" | ours {mine['tokens_per_second'] / ours['tokens_per_second']:.3f}x ours at bf16"
            line += f", memory {mine['peak_allocated_bytes'] / ours['peak_allocated_bytes']:.2f}x"
        line += vs_peer(p, mine, "A", theirs)
        print(line, flush=True)
