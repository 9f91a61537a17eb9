"""Verdicts, boundaries, protocol refusals and the noise threshold on CPU-made campaigns."""

from __future__ import annotations

import json

import pytest

from throughput_compare.cli import main


def run(a, b, out, *extra) -> int:
    return main([str(a), str(b), "--output", str(out), *extra])


def comparison(out):
    return json.loads((out / "comparison.json").read_text())


def test_equal_campaigns_are_the_same(lab, tmp_path, capsys):
    a, b = lab.build("a"), lab.build("b")
    assert run(a, b, tmp_path / "out") == 0
    c = comparison(tmp_path / "out")
    assert c["points"] and {p["verdict"] for p in c["points"]} == {"same"}
    assert all(p["ratio"] == pytest.approx(1.0) for p in c["points"])
    assert c["summary"] == f"B is the same on {len(c['points'])} of {len(c['points'])} points; no boundary moved."
    assert c["differences"] == []
    assert (tmp_path / "out" / "comparison.md").read_text().startswith(c["summary"] + "\n")
    assert capsys.readouterr().out.startswith(c["summary"])


def test_remeasured_ten_percent_faster_is_faster_on_each_point(lab, tmp_path):
    a = lab.build("a")
    b = lab.build("b", edit=lambda built: lab.remeasure(built, slower=1 / 1.1))
    assert run(a, b, tmp_path / "out") == 0
    c = comparison(tmp_path / "out")
    assert {p["verdict"] for p in c["points"]} == {"faster"}
    assert all(p["ratio"] == pytest.approx(1.1) for p in c["points"])
    n = len(c["points"])
    assert c["summary"] == f"B is 10.0% faster on {n} of {n} points; no boundary moved."
    # and the other way round
    assert run(b, a, tmp_path / "back") == 0
    assert {p["verdict"] for p in comparison(tmp_path / "back")["points"]} == {"slower"}


def test_moved_boundary_is_reported(lab, tmp_path):
    a, b = lab.build("a", first_oom=8), lab.build("b", first_oom={"20m-c512": 16, "20m-c1024": 8})
    assert run(a, b, tmp_path / "out") == 0
    c = comparison(tmp_path / "out")
    moved = [k for k in c["curves"] if k["boundary_moved"]]
    assert [(k["curve"], k["first_oom_a"], k["first_oom_b"]) for k in moved] == [("20m-c512", 8, 16)]
    assert "1 boundary moved (20m-c512: first OOM 8 → 16)" in c["summary"]
    assert c["only_in_b"] == ["20m-c512 b8"]
    assert "20m-c512: first OOM 8 → 16" in (tmp_path / "out" / "comparison.md").read_text()


def test_protocol_mismatch_is_refused_unless_allowed(lab, tmp_path, capsys):
    a = lab.build("a")
    b = lab.build("b", edit=lambda built: lab.change_protocol(built, window_seconds=5.0))
    assert run(a, b, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "protocol (window_seconds: A 10.0, B 5.0)" in err[0] and "--allow-protocol-change" in err[0]
    )
    assert not (tmp_path / "out").exists()
    assert run(a, b, tmp_path / "out", "--allow-protocol-change") == 0
    c = comparison(tmp_path / "out")
    assert [(d["area"], d["field"], d["a"], d["b"]) for d in c["differences"]] == [
        ("protocol", "window_seconds", "10.0", "5.0")
    ]
    assert c["allow_protocol_change"] is True


def test_a_precision_difference_is_accepted_by_name_and_said_at_the_top(lab, tmp_path, capsys):
    a = lab.build("a")
    b = lab.build("b", edit=lambda built: lab.change_precision(built, "fp8-tensorwise"))
    assert run(a, b, tmp_path / "out") == 0
    c = comparison(tmp_path / "out")
    assert [(d["area"], d["field"], d["a"], d["b"], d["refuses"]) for d in c["differences"]] == [
        ("precision", "precision", "bf16", "fp8-tensorwise", False)
    ]
    assert c["allow_protocol_change"] is False and c["points"]
    top = "Precision comparison: A bf16, B fp8-tensorwise (accepted by name)"
    assert capsys.readouterr().out.startswith(top)
    assert (tmp_path / "out" / "comparison.md").read_text().startswith(top)


def test_points_where_no_linear_ran_in_fp8_are_said_at_the_top(lab, tmp_path, capsys):
    """Rowwise's filter converts none of 20m's linears: B's points trained in BF16."""
    a = lab.build("a")
    b = lab.build("b", edit=lambda built: lab.change_precision(built, "fp8-rowwise"))
    assert run(a, b, tmp_path / "out") == 0
    c = comparison(tmp_path / "out")
    assert c["no_fp8_linears"] and all(p.startswith("B: 20m-c") for p in c["no_fp8_linears"])
    assert len(c["no_fp8_linears"]) == len(c["points"]) + len(c["only_in_b"])
    said = f"No linear ran in FP8 at {len(c['no_fp8_linears'])} point(s) ("
    assert said in capsys.readouterr().out.splitlines()[0]
    assert said in (tmp_path / "out" / "comparison.md").read_text().splitlines()[0]
    # At tensorwise the filter converts 8 of 20m's linears: nothing to say.
    tensorwise = lab.build("t", edit=lambda built: lab.change_precision(built, "fp8-tensorwise"))
    assert run(a, tensorwise, tmp_path / "out-t") == 0
    assert comparison(tmp_path / "out-t")["no_fp8_linears"] == []
    assert "No linear ran in FP8" not in capsys.readouterr().out


def test_recipe_difference_is_refused_unless_allowed(lab, tmp_path, capsys):
    a = lab.build("a")
    b = lab.build("b", edit=lambda built: lab.change_recipe(built, rope_theta=500_000.0))
    assert run(a, b, tmp_path / "out") == 2
    assert "recipe (20m: model.rope_theta: A 10000.0, B 500000.0)" in capsys.readouterr().err
    assert run(a, b, tmp_path / "out", "--allow-protocol-change") == 0
    differences = comparison(tmp_path / "out")["differences"]
    assert [(d["area"], d["field"]) for d in differences] == [
        ("recipe", "20m: model.rope_theta"),
        ("frozen", "recipes/20m.json"),
    ]


def test_different_kinds_are_refused(lab, tmp_path, capsys):
    a_built = lab.unaudited("parent")
    lab.audited(a_built)
    opt = lab.build("opt", optimizer_of=a_built)
    assert run(a_built.root, opt, tmp_path / "out") == 2
    assert "same kind" in capsys.readouterr().err


def test_optimizer_campaigns_compare_their_baselines(lab, tmp_path):
    parent = lab.unaudited("parent")
    a, b = lab.build("oa", optimizer_of=parent), lab.build("ob", optimizer_of=parent)
    assert run(a, b, tmp_path / "out") == 0
    c = comparison(tmp_path / "out")
    assert c["kind"] == "optimizer-timing" and {p["verdict"] for p in c["points"]} == {"same"}


def test_hardware_and_kernel_differences_are_stated_not_refused(lab, tmp_path):
    from throughput_schema import Hardware

    old = Hardware(gpu_name="NVIDIA H200", driver="570.1", cuda="12.8", torch="2.10.0", python="3.12.3")
    new = Hardware(gpu_name="NVIDIA GH200 480GB", driver="580.2", cuda="13.0", torch="2.11.0", python="3.12.3")
    a = lab.build("a", edit=lambda built: lab.remeasure(built, hardware=old))
    b = lab.build("b", edit=lambda built: lab.remeasure(built, hardware=new, kernels={"attention": "flash"}))
    assert run(a, b, tmp_path / "out") == 0
    c = comparison(tmp_path / "out")
    found = {(d["area"], d["field"]): (d["a"], d["b"]) for d in c["differences"]}
    assert found == {
        ("hardware", "gpu_name"): ("NVIDIA H200", "NVIDIA GH200 480GB"),
        ("hardware", "driver"): ("570.1", "580.2"),
        ("hardware", "cuda"): ("12.8", "13.0"),
        ("hardware", "torch"): ("2.10.0", "2.11.0"),
        ("kernels", "kernels"): ("default", "attention=flash, norm=default, rope=default, swiglu=default"),
    }
    markdown = (tmp_path / "out" / "comparison.md").read_text()
    assert "- hardware torch: A 2.10.0 · B 2.11.0" in markdown
    assert "## Batch recommendation" in markdown


OLD_KERNELS = {
    "attention": "auto",
    "cross_entropy": "default",
    "compile_mode": "default",
    "inductor_tuning": "default",
    "optimizer": "fused",
}  # before `swiglu` was always recorded


@pytest.mark.parametrize(
    "b_kernels, expected",
    [
        (OLD_KERNELS, None),  # old against old
        ({**OLD_KERNELS, "swiglu": "default"}, None),  # a missing swiglu is "default"
        ({**OLD_KERNELS, "swiglu": "default", "norm": "default", "rope": "default"}, None),  # so are norm and rope
        ({**OLD_KERNELS, "attention": "sdpa"}, None),  # an old "auto" attention ran SDPA's choice
        (
            {**OLD_KERNELS, "attention": "fa4"},
            (
                "attention=sdpa, compile_mode=default, cross_entropy=default, inductor_tuning=default, norm=default, "
                "optimizer=fused, rope=default, swiglu=default",
                "attention=fa4, compile_mode=default, cross_entropy=default, inductor_tuning=default, norm=default, "
                "optimizer=fused, rope=default, swiglu=default",
            ),
        ),
        (
            {**OLD_KERNELS, "optimizer": "triton", "swiglu": "triton"},
            (
                "attention=sdpa, compile_mode=default, cross_entropy=default, inductor_tuning=default, norm=default, "
                "optimizer=fused, rope=default, swiglu=default",
                "attention=sdpa, compile_mode=default, cross_entropy=default, inductor_tuning=default, norm=default, "
                "optimizer=triton, rope=default, swiglu=triton",
            ),
        ),
    ],
)
def test_results_without_swiglu_ran_the_default_swiglu(lab, tmp_path, b_kernels, expected):
    a = lab.build("a", edit=lambda built: lab.remeasure(built, kernels=OLD_KERNELS))
    b = lab.build("b", edit=lambda built: lab.remeasure(built, kernels=b_kernels))
    assert run(a, b, tmp_path / "out") == 0
    found = {(d["area"], d["field"]): (d["a"], d["b"]) for d in comparison(tmp_path / "out")["differences"]}
    assert found.get(("kernels", "kernels")) == expected
