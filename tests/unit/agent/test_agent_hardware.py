"""GPU discovery: sim specs and catalog VRAM, fake GPUs, NVML absent, card type from device names; status files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from services.agent.build import AgentOptions, discover_hardware
from services.agent.hardware import (
    HardwareSpecError,
    NoGpusError,
    fake_hardware,
    guess_card_type,
    nvml_hardware,
    parse_sim_spec,
    simulated_hardware,
)
from services.agent.status_file import TaskStatus, new_checkpoint, progress_changed, read_status
from shared.cards import load_catalog
from shared.events.reasons import NodeMode

CATALOG = load_catalog()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("H100x8", ("H100", 8)), ("A100-80Gx4", ("A100-80G", 4)), ("T4X1", ("T4", 1)), (" L40Sx2 ", ("L40S", 2))],
)
def test_sim_specs_name_a_card_and_a_count(spec: str, expected: tuple[str, int]) -> None:
    assert parse_sim_spec(spec) == expected


@pytest.mark.parametrize("spec", ["H100", "x8", "H100x0", "H100x-1", ""])
def test_bad_sim_specs_say_what_is_expected(spec: str) -> None:
    with pytest.raises(HardwareSpecError, match="CARDxN"):
        parse_sim_spec(spec)


def test_simulated_gpus_get_their_vram_from_the_card_catalog() -> None:
    hardware = simulated_hardware("A100-40Gx4", CATALOG)
    assert hardware.card_type == "A100-40G" and hardware.mode is NodeMode.SIM
    assert [gpu.index for gpu in hardware.gpus] == [0, 1, 2, 3]
    assert {gpu.vram_gb for gpu in hardware.gpus} == {CATALOG.card("A100-40G").vram_gb}


def test_an_unknown_sim_card_names_the_known_ones() -> None:
    with pytest.raises(HardwareSpecError, match="H100"):
        simulated_hardware("B9000x8", CATALOG)


def test_fake_gpus_are_real_mode_and_need_a_known_card_type() -> None:
    hardware = fake_hardware(2, "T4", CATALOG)
    assert hardware.mode is NodeMode.REAL and hardware.indices == frozenset({0, 1})
    with pytest.raises(HardwareSpecError):
        fake_hardware(2, "nope", CATALOG)
    with pytest.raises(HardwareSpecError):
        fake_hardware(0, "T4", CATALOG)


def test_real_mode_without_nvml_says_no_gpus_found_and_how_to_fix_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as if nvidia-ml-py were not installed
    with pytest.raises(NoGpusError, match="no GPUs found.*gpu extra"):
        nvml_hardware()
    with pytest.raises(NoGpusError):
        discover_hardware(AgentOptions(agent_id="a"))


@pytest.mark.parametrize(
    ("device", "card"),
    [
        ("NVIDIA A100-SXM4-80GB", "A100-80G"),
        ("NVIDIA A100-PCIE-40GB", "A100-40G"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA A10", "A10"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-32GB", "V100-32G"),
    ],
)
def test_card_type_is_guessed_from_the_nvml_device_name(device: str, card: str) -> None:
    assert guess_card_type(device, CATALOG) == card


def test_an_unrecognised_device_asks_for_card_type() -> None:
    with pytest.raises(HardwareSpecError, match="--card-type"):
        guess_card_type("Imaginary Accelerator 9", CATALOG)


@pytest.mark.parametrize(
    "options",
    [
        AgentOptions(agent_id="a", sim="H100x8", fake_gpus=2, card_type="T4"),
        AgentOptions(agent_id="a", fake_gpus=2),
        AgentOptions(agent_id="a", sim="H100x8", time_scale=0),
        AgentOptions(agent_id="a", sim="H100x8", heartbeat_s=0),
    ],
)
def test_inconsistent_options_are_refused(options: AgentOptions) -> None:
    with pytest.raises(HardwareSpecError):
        options.validate()


def test_status_file_reads_known_fields_and_skips_broken_files(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    assert read_status(path) is None
    path.write_text(json.dumps({"progress": 0.5, "checkpoint": "s3://b/k", "extra": 1}))
    assert read_status(path) == TaskStatus(progress=0.5, checkpoint="s3://b/k")
    path.write_text('{"progress": 0.5, "checkp')  # half-written
    assert read_status(path) is None
    path.write_text(json.dumps({"progress": 1.5}))  # out of range
    assert read_status(path) is None


def test_status_changes_report_new_checkpoints_and_moved_progress_only() -> None:
    first = TaskStatus(progress=0.1, checkpoint="c1")
    same = TaskStatus(progress=0.1, checkpoint="c1", message="still")
    later = TaskStatus(progress=0.2, checkpoint="c2")
    assert new_checkpoint(None, first) == "c1" and progress_changed(None, first)
    assert new_checkpoint(first, same) is None and not progress_changed(first, same)
    assert new_checkpoint(same, later) == "c2" and progress_changed(same, later)
    assert not progress_changed(later, TaskStatus(message="no numbers"))
