"""What GPUs this node has: simulated (`H100x8` + the card catalog), NVML (real), or fake (testing aid).

NVML comes from `nvidia-ml-py` (the `gpu` extra: `pip install 'cardflow[gpu]'`); without it, or
without an NVIDIA driver, discovery fails with `NoGpusError` and a sentence saying why.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared.cards import Catalog, load_catalog
from shared.events.reasons import NodeMode
from shared.events.reports import GpuInfo

_SIM_SPEC = re.compile(r"^(?P<card>.+)[xX](?P<count>[0-9]+)$")  # greedy: the last x splits
_BYTES_PER_GB = 1e9


class NoGpusError(RuntimeError):
    """No usable GPUs were found (no NVML library, no driver, or zero devices)."""


class HardwareSpecError(ValueError):
    """A `--sim` / `--card-type` value this agent cannot use."""


@dataclass(frozen=True, slots=True)
class NodeHardware:
    """The node as the agent registers it."""

    card_type: str
    mode: NodeMode
    gpus: tuple[GpuInfo, ...]

    @property
    def indices(self) -> frozenset[int]:
        return frozenset(gpu.index for gpu in self.gpus)

    def vram_gb(self, index: int) -> float:
        return next(gpu.vram_gb for gpu in self.gpus if gpu.index == index)


def parse_sim_spec(spec: str) -> tuple[str, int]:
    """`"H100x8"` -> `("H100", 8)`; the card name may itself contain an `x` (the last one splits)."""
    match = _SIM_SPEC.match(spec.strip())
    if match is None or int(match["count"]) < 1:
        raise HardwareSpecError(f"--sim expects CARDxN, e.g. H100x8, got {spec!r}")
    return match["card"], int(match["count"])


def simulated_hardware(spec: str, catalog: Catalog | None = None) -> NodeHardware:
    """GPUs of a simulated node, with the VRAM the card catalog gives their card type."""
    card_type, count = parse_sim_spec(spec)
    card = _catalog_card(catalog or load_catalog(), card_type)
    gpus = tuple(GpuInfo(index=i, vram_gb=card.vram_gb, uuid=f"SIM-{card_type}-{i}") for i in range(count))
    return NodeHardware(card_type, NodeMode.SIM, gpus)


def fake_hardware(count: int, card_type: str, catalog: Catalog | None = None) -> NodeHardware:
    """`--real --fake-gpus N --card-type T`: real subprocess runs on GPUs that do not exist (testing aid)."""
    if count < 1:
        raise HardwareSpecError("--fake-gpus must be >= 1")
    card = _catalog_card(catalog or load_catalog(), card_type)
    gpus = tuple(GpuInfo(index=i, vram_gb=card.vram_gb, uuid=f"FAKE-{card_type}-{i}") for i in range(count))
    return NodeHardware(card_type, NodeMode.REAL, gpus)


def nvml_hardware(card_type: str | None = None, catalog: Catalog | None = None) -> NodeHardware:
    """The node's NVIDIA GPUs via NVML; the card type is `card_type` or guessed from the device name."""
    nvml = load_nvml()
    try:
        nvml.nvmlInit()
    except Exception as exc:
        raise NoGpusError(f"no GPUs found: NVML could not initialise ({exc}); is the NVIDIA driver installed?") from exc
    count = nvml.nvmlDeviceGetCount()
    if count < 1:
        raise NoGpusError("no GPUs found: NVML reports 0 devices")
    gpus, names = [], []
    for index in range(count):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        gpus.append(GpuInfo(index=index, vram_gb=round(memory.total / _BYTES_PER_GB, 1), uuid=_text(nvml.nvmlDeviceGetUUID(handle))))
        names.append(_text(nvml.nvmlDeviceGetName(handle)))
    chosen = card_type or guess_card_type(names[0], catalog or load_catalog())
    return NodeHardware(chosen, NodeMode.REAL, tuple(gpus))


def load_nvml() -> Any:
    """The `pynvml` module of nvidia-ml-py, or `NoGpusError` saying how to install it."""
    try:
        import pynvml
    except ImportError as exc:
        raise NoGpusError(
            "no GPUs found: NVML is not available (install the gpu extra: pip install 'cardflow[gpu]'); "
            "to exercise the real runner without GPUs use --fake-gpus N --card-type T"
        ) from exc
    return pynvml


def nvml_meter() -> Callable[[int], tuple[float, float | None]]:
    """GPU index -> (utilisation %, memory used GB), read from NVML at each call."""
    nvml = load_nvml()
    handles: dict[int, Any] = {}

    def read(index: int) -> tuple[float, float | None]:
        handle = handles.get(index)
        if handle is None:
            handle = handles[index] = nvml.nvmlDeviceGetHandleByIndex(index)
        rates = nvml.nvmlDeviceGetUtilizationRates(handle)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        return float(rates.gpu), round(memory.used / _BYTES_PER_GB, 2)

    return read


def guess_card_type(device_name: str, catalog: Catalog) -> str:
    """The catalog card type whose name best matches an NVML device name (longest match wins)."""
    normalized = _normalize(device_name)
    candidates = [name for name in catalog.names if _normalize(name.split("-")[0]) in normalized]
    if not candidates:
        raise HardwareSpecError(f"cannot tell the card type of {device_name!r}; pass --card-type (known: {', '.join(catalog.names)})")
    memory = re.search(r"(\d+)\s*GB", device_name, re.IGNORECASE)
    exact = [name for name in candidates if memory and name.endswith(f"-{memory[1]}G")]
    return (exact or sorted(candidates, key=len, reverse=True))[0]


def _catalog_card(catalog: Catalog, card_type: str) -> Any:
    try:
        return catalog.card(card_type)
    except KeyError as exc:
        raise HardwareSpecError(str(exc.args[0])) from None


def _normalize(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
