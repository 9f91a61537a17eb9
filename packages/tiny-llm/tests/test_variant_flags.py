"""The worker's kernel flags (tiny_llm.kernels): each parses, is recorded in the result's
`kernels` as the kernel that ran, and a bad value is one line and exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from throughput_schema import WorkerResult, read
from tiny_llm.cli import main
from tiny_llm.kernels import Kernels

ROOT = Path(__file__).resolve().parents[3]

TINY = [
    "--config",
    str(ROOT / "configs" / "tiny.yaml"),
    "--set",
    "model.vocab_size=512",
    "--set",
    "training.micro_batch_size=2",
    "--set",
    "training.batch_tokens=256",
]
FAST = [
    "--warmup",
    "1",
    "--windows",
    "1",
    "--window-seconds",
    "0.05",
    "--min-updates-per-window",
    "1",
    "--device",
    "cpu",
]


def test_cli_flags_recorded_in_result(tmp_path, capsys):
    out = tmp_path / "r.json"
    args = [
        "benchmark-throughput-worker",
        *TINY,
        "--output",
        str(out),
        *FAST,
        "--attention-backend",
        "flash",
        "--cross-entropy",
        "chunked",
        "--ce-chunk-tokens",
        "100",
    ]
    assert main(args) == 0
    result = read(out, WorkerResult)
    assert result.kernels == {
        "attention": "flash",
        "cross_entropy": "chunked",
        "compile_mode": "default",
        "inductor_tuning": "default",
        "ce_chunk_tokens": "100",
        "optimizer": "tensor",
        "swiglu": "default",
        "norm": "default",
        "rope": "default",
    }
    assert "attention=flash" in capsys.readouterr().out


def test_cli_defaults_recorded(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["benchmark-throughput-worker", *TINY, "--output", str(out), *FAST]) == 0
    # "auto" is recorded as the kernels that ran: on the CPU the pure-tensor optimizer, the
    # (eager) inductor SwiGLU, PyTorch's SDPA choice and the inductor RoPE beside it.
    ran = {**Kernels().record(), "attention": "sdpa", "optimizer": "tensor", "swiglu": "default", "rope": "default"}
    assert read(out, WorkerResult).kernels == ran
    line = capsys.readouterr().out  # the automatic choices are not flagged as variants
    assert all(f"{field}=" not in line for field in ("optimizer", "swiglu", "attention", "rope"))


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--attention-backend", "fast"], "--attention-backend"),
        (["--cross-entropy", "fused"], "--cross-entropy"),
        (["--ce-chunk-tokens", "0"], "--ce-chunk-tokens"),
        (["--optimizer-kernel", "foreach"], "--optimizer-kernel"),
        (["--swiglu-kernel", "cuda"], "--swiglu-kernel"),
        (["--norm-kernel", "auto"], "--norm-kernel"),
        (["--rope-kernel", "cuda"], "--rope-kernel"),
    ],
)
def test_cli_bad_variant_flags(tmp_path, capsys, extra, needle):
    out = tmp_path / "r.json"
    try:
        rc = main(["benchmark-throughput-worker", *TINY, "--output", str(out), *FAST, *extra])
    except SystemExit as exc:  # argparse's choices: the one-line parser exits 2
        rc = exc.code
    err = capsys.readouterr().err.strip()
    assert rc == 2 and needle in err and len(err.splitlines()) == 1 and not out.exists()
