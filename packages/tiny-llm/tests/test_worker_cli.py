"""The worker CLI end to end on the CPU (tiny recipe), and its bad-input handling."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tiny_llm
from throughput_schema import EXIT_CODES, WorkerResult, outcome_kind, read
from tiny_llm.cli import main
from tiny_llm.hardware import GIB, autocast_dtype, peak_bf16_flops
from tiny_llm.protocol import NonFiniteState
from tiny_llm.worker import classify

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
    "2",
    "--windows",
    "5",
    "--window-seconds",
    "0.2",
    "--min-updates-per-window",
    "2",
    "--device",
    "cpu",
]


def test_cpu_worker_end_to_end(tmp_path, capsys):
    out = tmp_path / "point" / "result.json"
    assert main(["benchmark-throughput-worker", *TINY, "--output", str(out), *FAST]) == 0
    result = read(out, WorkerResult)
    assert outcome_kind(result.outcome) == "ok" and result.exit_code == 0
    # BF16 only where this CPU multiplies it natively (tiny_llm.hardware.autocast_dtype).
    fp32 = autocast_dtype(torch.device("cpu")) is None
    assert result.backend == ("cpu-eager-fp32" if fp32 else "cpu-eager") and result.mode == "throughput"
    # The production worker names itself: only its results pass the audit and the report.
    assert (result.worker.module, result.worker.version, result.worker.written_by) == (
        "tiny_llm",
        tiny_llm.__version__,
        "worker",
    )
    assert result.parameters == 4_473_472 - (32_000 - 512) * 128
    assert result.recipe.training.micro_batch_size == 2
    assert result.calibration.updates == 5 and result.calibration.updates_per_window >= 2
    assert len(result.windows) in (5, 10)
    n = result.calibration.updates_per_window
    assert [w.counter_after for w in result.windows] == [2 + 5 + n * (i + 1) for i in range(len(result.windows))]
    t = result.throughput
    rates = [w.updates * 256 / w.seconds for w in result.windows]
    assert t.window_tokens_per_second == pytest.approx(rates)
    assert t.tokens_per_second == pytest.approx(
        sorted(rates)[len(rates) // 2]
        if len(rates) % 2
        else (sorted(rates)[len(rates) // 2 - 1] + sorted(rates)[len(rates) // 2]) / 2
    )
    assert t.sequences_per_second == pytest.approx(t.tokens_per_second / 128)
    assert t.mfu is None and t.peak_flops is None and "peak unknown" in t.mfu_formula
    assert result.setup_seconds > 0 and result.memory is None
    assert result.hardware.torch == torch.__version__ and result.hardware.cpu_count > 0
    assert result.hardware.gpu_uuid == "" and result.hardware.gpu_name == ""
    assert result.protocol.warmup == 2 and result.protocol.seed == 42
    line = capsys.readouterr().out
    assert "tokens/s" in line and "sequences/s" in line and "MFU" in line and "CV" in line


def test_cpu_optimizer_timing_from_host_clock_events(tmp_path):
    """On the CPU the three timing points are host clock readings; the summary and the raw
    bursts are the same records as on the GPU."""
    out = tmp_path / "result.json"
    assert main(["benchmark-throughput-worker", *TINY, "--output", str(out), *FAST, "--optimizer-timing"]) == 0
    result = read(out, WorkerResult)
    t = result.optimizer_timing
    assert outcome_kind(result.outcome) == "ok" and result.mode == "optimizer-timing" and t is not None
    assert t.bursts and all(0 < b.optimizer_ms < b.graph_ms for b in t.bursts)
    assert 0 < t.optimizer_ms and 0 < t.share_of_graph < 1 and 0 < t.share_of_wall < 1
    assert len(t.window_optimizer_ms) == len(result.windows)
    assert (tmp_path / "bursts.jsonl").read_text().count("\n") == len(t.bursts)


@pytest.mark.slow  # a worker process end to end
def test_python_m_guide_style_command(tmp_path):
    """`python -m tiny_llm` itself, as the guide (docs/guide.md) runs it (here on the CPU, tiny recipe)."""
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tiny_llm",
            "benchmark-throughput-worker",
            *TINY,
            "--set",
            "optimizer.lr=0.001",
            "--set",
            "optimizer.beta2=0.99",
            "--output",
            str(out),
            *FAST,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert outcome_kind(read(out, WorkerResult).outcome) == "ok"


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--set", "model.context_length=100"], "context_length"),
        (["--set", "training.batch_tokens=999"], "batch_tokens"),
        (["--set", "model.nope=1"], "unknown key"),
        (["--windows", "0"], "--windows"),
        (["--window-seconds", "0"], "--window-seconds"),
        (["--min-updates-per-window", "0"], "--min-updates-per-window"),
    ],
)
def test_bad_input_one_line_exit_2(tmp_path, capsys, extra, needle):
    out = tmp_path / "r.json"
    args = ["benchmark-throughput-worker", *TINY, "--output", str(out), *FAST, *extra]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_missing_config(tmp_path, capsys):
    args = [
        "benchmark-throughput-worker",
        "--config",
        str(tmp_path / "nope.yaml"),
        "--output",
        str(tmp_path / "r.json"),
    ]
    assert main(args) == 2
    assert "not found" in capsys.readouterr().err


def test_output_is_directory(tmp_path, capsys):
    assert main(["benchmark-throughput-worker", *TINY, "--output", str(tmp_path), *FAST]) == 2
    assert "directory" in capsys.readouterr().err


def test_classify_outcomes():
    oom = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert outcome_kind(classify(oom, "capture")) == "cuda_oom"
    assert classify(oom, "capture").phase == "capture"
    wrapped = RuntimeError("backend failed")
    wrapped.__cause__ = oom
    assert outcome_kind(classify(wrapped, "compile")) == "cuda_oom"
    assert classify(NonFiniteState("measurement", 3), "measurement").window == 3
    from torch._dynamo.exc import TorchDynamoException

    assert outcome_kind(classify(TorchDynamoException("inductor failed"), "compile")) == "compile_error"
    assert outcome_kind(classify(ValueError("x"), "warmup")) == "crashed"
    assert EXIT_CODES["cuda_oom"] == 3


def test_long_messages_end_at_a_sentence():
    # PyTorch's text from the H200 run (20m, context 512, batch 2048), which was cut mid-word.
    oom = torch.cuda.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 62.50 GiB. GPU 0 has a total capacity of 139.80 GiB of which "
        "37.67 GiB is free. Including non-PyTorch memory, this process has 102.12 GiB memory in use. Of the "
        "allocated memory 100.87 GiB is allocated by PyTorch, and 521.85 MiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
        "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    message = classify(oom, "compile").message
    assert len(message) <= 500 and message.endswith("to avoid fragmentation.")
    assert message.startswith("OutOfMemoryError: CUDA out of memory. Tried to allocate 62.50 GiB.")
    unbroken = classify(ValueError("x" * 900), "warmup").message
    assert len(unbroken) == 500 and unbroken.endswith("xx...")
    assert classify(ValueError("short. text"), "warmup").message == "ValueError: short. text"


def test_peak_lookup_needs_name_and_memory():
    assert peak_bf16_flops("NVIDIA H200", int(140.4 * GIB)) == 989e12
    assert peak_bf16_flops("NVIDIA H200", int(80 * GIB)) is None
    assert peak_bf16_flops("NVIDIA H100 80GB HBM3", int(79.1 * GIB)) == 989e12
    assert peak_bf16_flops("NVIDIA GH200 480GB", int(95.0 * GIB)) == 989e12
    assert peak_bf16_flops("NVIDIA H100 PCIe", int(79.1 * GIB)) == 756e12
    assert peak_bf16_flops("NVIDIA A100-SXM4-80GB", int(79.1 * GIB)) == 312e12
    assert peak_bf16_flops("NVIDIA RTX 4090", int(24 * GIB)) is None
    assert peak_bf16_flops("", 0) is None


def _request(tmp_path: Path):
    from throughput_schema import PointSpec, Protocol, WorkerRequest, write_atomic
    from throughput_schema.recipe import load_recipe

    recipe = load_recipe(ROOT / "configs" / "tiny.yaml", [a for a in TINY[3::2]])
    protocol = Protocol(warmup=2, windows=5, window_seconds=0.2, min_updates_per_window=2)
    request = WorkerRequest(
        point=PointSpec(model="tiny", context_length=128, batch_size=2),
        recipe=recipe,
        protocol=protocol,
        campaign=str(tmp_path),
        python=sys.executable,
        result=str(tmp_path / "result.json"),
    )
    return write_atomic(tmp_path / "request.json", request), recipe


def test_request_gives_the_recipe_and_the_protocol(tmp_path):
    path, recipe = _request(tmp_path)
    out = tmp_path / "result.json"
    assert main(["benchmark-throughput-worker", "--request", str(path), "--output", str(out), "--device", "cpu"]) == 0
    result = read(out, WorkerResult)
    assert outcome_kind(result.outcome) == "ok" and result.recipe == recipe
    assert result.protocol.warmup == 2 and result.protocol.window_seconds == 0.2
    assert result.calibration.updates_per_window >= 2


@pytest.mark.parametrize("extra", [["--config", "x.yaml"], ["--set", "model.vocab_size=512"], ["--warmup", "3"]])
def test_request_refuses_a_second_source(tmp_path, capsys, extra):
    path, _ = _request(tmp_path)
    out = tmp_path / "result.json"
    assert main(["benchmark-throughput-worker", "--request", str(path), "--output", str(out), *extra]) == 2
    assert "--request carries the recipe" in capsys.readouterr().err
    assert not out.exists()


def test_neither_config_nor_request(tmp_path, capsys):
    assert main(["benchmark-throughput-worker", "--output", str(tmp_path / "r.json")]) == 2
    assert "--request" in capsys.readouterr().err


def test_the_flags_and_their_defaults_are_the_protocol_records():
    """The schema's Protocol is the one home of the protocol's defaults: without flags the
    worker measures with exactly that record, and a flag changes only its own field."""
    from throughput_schema import Protocol
    from tiny_llm.cli import build_parser
    from tiny_llm.worker_cli import resolve

    base = ["benchmark-throughput-worker", "--config", str(ROOT / "configs/tiny.yaml"), "--output", "r.json"]
    _, protocol = resolve(build_parser().parse_args(base))
    assert protocol == Protocol()
    _, protocol = resolve(build_parser().parse_args([*base, "--windows", "7", "--window-seconds", "2.5"]))
    assert protocol == Protocol(windows=7, window_seconds=2.5)
