"""An optimizer difference (AdamW against Muon) accepted by name, and said at the top."""

from __future__ import annotations

import json

from throughput_compare.cli import main


def run(a, b, out, *extra) -> int:
    return main([str(a), str(b), "--output", str(out), *extra])


def test_an_optimizer_difference_is_refused_then_accepted_by_name_and_said_first(lab, tmp_path, capsys):
    a = lab.build("a")
    b = lab.build("b", edit=lambda built: lab.change_optimizer(built, "muon"))
    assert run(a, b, tmp_path / "refused") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "protocol (optimizer: A adamw, B muon, and 1 more)" in err[0], err
    assert "pass --allow-difference optimizer" in err[0] and not (tmp_path / "refused").exists()

    out = tmp_path / "out"
    assert run(a, b, out, "--allow-difference", "optimizer") == 0
    c = json.loads((out / "comparison.json").read_text())
    top = "The optimizer differs (A adamw, B muon; 2 differences), accepted by --allow-difference optimizer"
    assert c["accepted"] == [top + ": every ratio below includes the optimizer's change."]
    assert capsys.readouterr().out.startswith(top)
    assert (out / "comparison.md").read_text().startswith(f"**{top}")
    assert {(d["area"], d["field"], d["refuses"]) for d in c["differences"]} == {
        ("protocol", "optimizer", False),
        ("recipe", "20m: optimizer.name", False),
    }
    assert c["allow_protocol_change"] is False


def test_accepting_the_optimizer_accepts_no_other_difference(lab, tmp_path, capsys):
    a = lab.build("a")

    def muon_with_shorter_windows(built):
        lab.change_optimizer(built, "muon")
        lab.change_protocol(built, window_seconds=5.0)

    b = lab.build("b", edit=muon_with_shorter_windows)
    assert run(a, b, tmp_path / "out", "--allow-difference", "optimizer") == 2
    err = capsys.readouterr().err
    assert "window_seconds: A 10.0, B 5.0" in err and "--allow-protocol-change" in err
    assert not (tmp_path / "out").exists()


def test_an_unknown_name_is_one_line_exit_2(lab, tmp_path, capsys):
    a = lab.build("a")
    code = None
    try:
        run(a, a, tmp_path / "out", "--allow-difference", "precision-and-more")
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "invalid choice: 'precision-and-more'" in err[0]
    assert not (tmp_path / "out").exists()
