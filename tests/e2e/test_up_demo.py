"""`cardflow up --demo` (what `make run` runs): the demo settles, summarises, shows governance at work
(an approval and a denial by its reviewer, an idle reclaim, alerts on record), and stops without orphans."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[2]


def processes_of(data_dir: Path) -> list[psutil.Process]:
    """Live processes started for this instance (their environment names its data dir)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("CARDFLOW_DATA_DIR") == str(data_dir) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            continue
    return found


def wait_for_text(path: Path, pattern: str, up: subprocess.Popen[bytes], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        if re.search(pattern, text):
            return text
        assert up.poll() is None, f"cardflow up exited early:\n{text[-3000:]}"
        time.sleep(0.5)
    raise AssertionError(f"no {pattern!r} within {timeout:.0f}s:\n{path.read_text(errors='replace')[-3000:]}")


def test_up_demo_settles_with_a_summary_and_stops_cleanly(data_dir_factory: Callable[[], Path]) -> None:
    data_dir = data_dir_factory()
    output = data_dir / "up.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARDFLOW_")} | {"COLUMNS": "200"}
    with open(output, "wb") as sink:
        up = subprocess.Popen([sys.executable, "-m", "services.cli.main", "up", "--demo", "--data-dir", str(data_dir)],
                              cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, env=env)  # fmt: skip
    try:
        text = wait_for_text(output, r"demo settled after \d+s", up, timeout=240)
        governance = governance_on_record(data_dir, re.search(r"Console: (http://\S+)", text)[1])
        children = processes_of(data_dir)
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=90)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()

    assert up.returncode == 0
    total = re.search(r"total\s*│\s*(\d+)\s*│\s*(\d+)\s*│\s*(\d+)\s*│", text)
    assert total is not None, text[-3000:]
    # every demo task but three succeeded (the llm jobs, sent without project or profile, only through
    # their templates): the impossible one, the denied one, and the idle one (reclaimed twice, then held)
    assert total.groups() == ("29", "26", "3")
    assert "finetune-13b-rush cancelled: cancelled: denied by user:demo-reviewer: self-declared core" in text
    assert re.search(r"stuck-dataloader held: reclaimed 2 times for idle GPUs; held for a person", text)
    assert re.search(r"t=\d+s user:demo-reviewer approved finetune-7b: ", text)
    assert re.search(r"giant-moe\s+unmatchable: needs 200 GB", text)
    assert "the submission was rejected" in text and "did you mean 'gpus'" in text
    assert "uploaded s3://cardflow-demo/features/2024-06/_READY" in text
    assert {f"{name}.log" for name in ("intake", "dispatcher", "views", "agent-l40s-a")} <= {p.name for p in (data_dir / "logs").iterdir()}
    assert len(children) >= 10  # six services, the console, three agents (and the embedded servers)
    assert processes_of(data_dir) == []
    assert "Stopped." in output.read_text(errors="replace")
    # Not a terminal: plain progress lines, no cursor movement; Ctrl-C / SIGTERM reports no restart.
    assert re.search(r"^\s*\d+s  tasks: .*GPUs leased", text, re.MULTILINE)
    assert "\x1b[" not in text and "\r" not in text
    assert "httpx INFO" not in text
    assert "restarting in" not in output.read_text(errors="replace")

    # Governance, as the API records it: the reviewer (a token made through the identity API) approved
    # finetune-7b, which then ran; denied finetune-13b-rush; idle reclaim took stuck-dataloader's GPUs
    # back and requeued it from its checkpoint; the alerts are on record and the banner shows them.
    approved = [e for e in governance["approved"] if e["type"] == "task.approved"]
    assert [e["actor"] for e in approved] == ["user:demo-reviewer"]
    assert governance["approved"][-1]["state"] == "succeeded"
    assert any(e["type"] == "task.cancelled" and "denied by user:demo-reviewer" in e["detail"] for e in governance["denied"])
    assert not any(e["type"] == "lease.granted" for e in governance["denied"])  # it never held a GPU
    assert sum(e["type"] == "task.requeued" for e in governance["idle"]) >= 2
    assert (governance["idle"][-1]["state"], governance["idle"][-1]["reason"]) == ("held", "repeatedly_idle")
    alerts = governance["alerts"]["counts"]
    assert alerts.get("idle_reclaim", 0) >= 1 and alerts.get("quota_expiring", 0) >= 1, governance["alerts"]
    # honest simulated agents run each task for its estimate in their own time: no success is flagged
    assert alerts.get("flagged_success", 0) == 0, governance["alerts"]
    banner = governance["banner"]  # the account's expiry once, as its countdown line; the idle reclaims as alerts
    assert any(a["kind"] == "expiring" and a["account_id"] == "demo-vision" and a["days_left"] <= 12 for a in banner), banner
    assert any(a["kind"] == "idle_reclaim" for a in banner), banner


def governance_on_record(data_dir: Path, url: str) -> dict[str, object]:
    """What the running instance's API says (as its local admin) about the demo's approvals, idle reclaim and alerts."""
    admin = {"authorization": f"Bearer {(data_dir / 'admin.token').read_text().strip()}"}
    with httpx.Client(base_url=url, headers=admin, timeout=30) as api:
        def history(name: str) -> list[dict[str, object]]:
            task_id = api.get("/v1/lookup/task", params={"ref": name}).raise_for_status().json()["task_id"]
            return api.get(f"/v1/tasks/{task_id}/history").raise_for_status().json()["history"]

        deadline = time.monotonic() + 90  # the ledger's quota check runs every 30 s: the expiry alert may come late
        while True:
            alerts = api.get("/v1/alerts/digest").raise_for_status().json()
            if {"idle_reclaim", "quota_expiring"} <= set(alerts["counts"]) or time.monotonic() > deadline:
                break
            time.sleep(1)
        return {"approved": history("finetune-7b"), "denied": history("finetune-13b-rush"),
                "idle": history("stuck-dataloader"), "alerts": alerts, "banner": api.get("/v1/alerts").raise_for_status().json()}
