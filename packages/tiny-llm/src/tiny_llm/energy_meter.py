"""The energy counter the worker reads around each window: a small meter interface, NVML's
meter for the GPU the worker runs on, and the reason where there is no counter.

A meter gives three things: `read()`, the counter in millijoules (an int, as NVML counts);
`power_limit_watts()`, the enforced power limit or None; `source()`, what counted
(`throughput_schema.energy.EnergySource`). The protocol reads it at each window's start and
end; the arithmetic on the readings is `throughput_schema.energy`'s.

`open_meter(device)` returns `(meter, "")` or `(None, reason)`: on the CPU, with the counter
turned off, where NVML cannot be loaded, where the GPU cannot be found in NVML, or where
the driver does not support the counter. Nothing is estimated in its place.

The GPU is found in NVML by the UUID torch reports for its current device (then by PCI bus
id), so CUDA_VISIBLE_DEVICES is respected: NVML itself numbers all the node's GPUs.

What the counter covers: `nvmlDeviceGetTotalEnergyConsumption` is the GPU board's counter
and the driver says no more, so `covers` stays empty. Where the driver also keeps a module
counter (Grace Hopper: CPU, GPU and memory), NVML's energy field answers for the module scope
with a different figure than for the GPU scope; the meter then reads the GPU scope and says
so in `covers`. That path is untested: only an H200 has been tried.

pynvml (`nvidia-ml-py`) is imported when a meter is opened, so the module imports anywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from typing import Protocol as TypingProtocol

from throughput_schema.energy import COUNTER_NVML, EnergySource

if TYPE_CHECKING:
    import torch

COVERS_GPU_SCOPE = (
    "GPU only (NVML energy field, GPU power scope); the module's counter (CPU, GPU and memory) is not used"
)
ENERGY_MODES = ("auto", "off")


class Meter(TypingProtocol):
    def read(self) -> int: ...  # the counter, millijoules
    def power_limit_watts(self) -> float | None: ...
    def source(self) -> EnergySource: ...


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


class NvmlMeter:
    """NVML's total-energy counter of one GPU (or its GPU-scope field where a module counter exists)."""

    def __init__(self, nvml: Any, handle: Any, *, gpu_scope: bool, device_index: int, name: str) -> None:
        self.nvml, self.handle, self.gpu_scope = nvml, handle, gpu_scope
        self._source = EnergySource(
            counter=COUNTER_NVML,
            device_index=device_index,
            device_name=name,
            covers=COVERS_GPU_SCOPE if gpu_scope else "",
        )

    def read(self) -> int:
        if self.gpu_scope:
            return _field_energy(self.nvml, self.handle, self.nvml.NVML_POWER_SCOPE_GPU)
        return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))

    def power_limit_watts(self) -> float | None:
        try:
            return self.nvml.nvmlDeviceGetEnforcedPowerLimit(self.handle) / 1000.0
        except self.nvml.NVMLError:
            return None

    def source(self) -> EnergySource:
        return self._source


def _field_energy(nvml: Any, handle: Any, scope: int) -> int:
    """NVML's energy field (millijoules) for one power scope; raises NVMLError where unsupported."""
    (value,) = nvml.nvmlDeviceGetFieldValues(handle, [(nvml.NVML_FI_DEV_ENERGY, scope)])
    if value.nvmlReturn != nvml.NVML_SUCCESS:
        raise nvml.NVMLError(value.nvmlReturn)
    return int(value.value.ullVal)


def _module_counter(nvml: Any, handle: Any) -> bool:
    """True where the driver keeps a module counter apart from the GPU's (read both scopes;
    a driver that ignores the scope answers the same figure for both)."""
    try:
        gpu = _field_energy(nvml, handle, nvml.NVML_POWER_SCOPE_GPU)
        module = _field_energy(nvml, handle, nvml.NVML_POWER_SCOPE_MODULE)
    except (nvml.NVMLError, AttributeError):
        return False
    return module != gpu


def _handle(nvml: Any, device: torch.device) -> Any:
    import torch

    props = torch.cuda.get_device_properties(device)
    uuid = getattr(props, "uuid", None)
    if uuid:
        try:
            return nvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        except nvml.NVMLError:
            pass
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        raise LookupError(f"CUDA device {device} has neither a UUID NVML knows nor a PCI bus id")
    pci = f"{getattr(props, 'pci_domain_id', 0):08x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
    return nvml.nvmlDeviceGetHandleByPciBusId(pci)


def open_meter(device: torch.device, mode: str = "auto") -> tuple[Meter | None, str]:
    """The meter of `device`'s GPU, or None and the reason there is no counter."""
    if mode == "off":
        return None, "energy counter turned off (--energy off)"
    if device.type != "cuda":
        return None, f"no energy counter on the {device.type.upper()} (the counter is the GPU's)"
    try:
        import pynvml as nvml  # type: ignore[import-untyped]
    except ImportError as exc:
        return None, f"NVML binding missing (nvidia-ml-py): {_reason(exc)}"
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return None, f"NVML could not be loaded: {_reason(exc)}"
    try:
        import torch

        index = device.index if device.index is not None else torch.cuda.current_device()
        handle = _handle(nvml, torch.device("cuda", index))
        name = nvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else str(name)
        meter = NvmlMeter(
            nvml,
            handle,
            gpu_scope=_module_counter(nvml, handle),
            device_index=int(nvml.nvmlDeviceGetIndex(handle)),
            name=name,
        )
        meter.read()
    except (nvml.NVMLError, LookupError) as exc:
        not_supported = isinstance(exc, nvml.NVMLError) and exc.value == nvml.NVML_ERROR_NOT_SUPPORTED
        what = "the GPU's driver does not support the energy counter" if not_supported else "NVML"
        return None, f"{what}: {_reason(exc)}"
    return meter, ""
