"""The processes of a running cardflow, and the `cardflow up` system part that starts them.

`run_cardflow(endpoints, demo, console, lang)` (registered in `services.cli.backends.SYSTEM_PARTS`):

1. start every service (`cardflow service config|intake|readiness|matcher|dispatcher|ledger|views|gate`)
   and the console (`cardflow console`) under a `Supervisor`, environment from the endpoints,
   each with its own Redis user and PostgreSQL role (shared.redis_acl, shared.pg_roles; the
   embedded servers make them),
   logs in `<data_dir>/logs/<name>.log`, crashed ones restarted with back-off; once the console
   answers, record its URL and the admin token file in `<data_dir>/run/api.env` (for
   `cardflow endpoints` and the CLI);
2. with `demo`: enroll a Redis user per simulated agent and start the fleet (`cardflow agent --sim ...`, a time scale that makes
   the workload finish within a minute) and the `DemoRunner` (workload + live view);
3. on exit (Ctrl-C / SIGTERM): stop the demo, then every process group (SIGTERM, wait, SIGKILL).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import time
from urllib.parse import urlencode
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from rich.console import Console

from services.cli.client import write_instance_api
from services.cli.lang import CliLang
from services.demo.runner import DemoOptions, DemoRunner
from services.demo.supervisor import ChildSpec, Notice, Supervisor
from services.demo.workload import DEMO_FLEET, DemoAgent, build_workload, demo_time_scale
from shared.cards import load_catalog
from shared.embedded import Endpoints
from shared.embedded.processes import free_ports
from services.identity.bootstrap import local_token_path
from shared.events import new_event_id
from shared.scheduling.policies import POLICIES

SERVICE_NAMES = ("config", "intake", "readiness", "matcher", "dispatcher", "ledger", "views", "gate")
CONSOLE_HOST = "127.0.0.1"
PREFERRED_CONSOLE_PORT = 8080
CONSOLE_START_TIMEOUT_S = 90.0

SYSTEM_WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {
        "no_console": "the console has not answered within {s:g} s; see {log}",
        "started": "Services and console started (logs: {logs}). Console: [bold]{url}[/bold]",
        "sign_in": "Sign in to the console as the local admin: {link}",
    },
    CliLang.ZH: {
        "no_console": "控制台在 {s:g} 秒内没有响应；见 {log}",
        "started": "服务和控制台已启动（日志：{logs}）。控制台：[bold]{url}[/bold]",
        "sign_in": "以本机管理员身份登录控制台：{link}",
    },
}  # fmt: skip
"""What `run_cardflow` prints, per language."""


def cardflow_argv(*args: str) -> list[str]:
    """`cardflow ARGS...` with this interpreter (works without the console script on PATH)."""
    return [sys.executable, "-m", "services.cli.main", *args]


def service_children(names: Sequence[str] = SERVICE_NAMES, env: dict[str, dict[str, str]] | None = None) -> list[ChildSpec]:
    """One `cardflow service NAME` per service; `env` adds environment variables per service name."""
    env = env or {}
    return [ChildSpec(name, cardflow_argv("service", name), env.get(name, {})) for name in names]


def demo_dispatcher_env(time_scale: float) -> dict[str, str]:
    """The demo's agents run `time_scale` times faster than the wall clock the dispatcher plans by, so
    the preset's preemption grace (600 s) shrinks by the same factor: core work still waits a
    moment for GPUs to come free before it preempts, as it would in production."""
    grace_s = POLICIES["cardflow"].preempt_after_s / max(time_scale, 1.0)
    return {"CARDFLOW_DISPATCHER_PREEMPT_AFTER_S": f"{grace_s:.3g}"}


def demo_config_env(time_scale: float) -> dict[str, str]:
    """The config service puts the demo's scaled policy in force as a recorded change
    (`services.config.seeding.reconcile_demo_policy`); without it, it takes a demo's values back."""
    return {"CARDFLOW_DEMO_TIME_SCALE": f"{time_scale:g}"}


def console_child(port: int, host: str = CONSOLE_HOST, env: dict[str, str] | None = None) -> ChildSpec:
    return ChildSpec("console", cardflow_argv("console", "--host", host, "--port", str(port)), env or {})


def agent_children(fleet: Sequence[DemoAgent], time_scale: float, *, heartbeat_s: float | None = None,
                   redis_urls: dict[str, str] | None = None) -> list[ChildSpec]:  # fmt: skip
    """One `cardflow agent --sim CARDxN` per demo agent (with its own Redis URL from `redis_urls`, if any)."""
    extra = ["--heartbeat", f"{heartbeat_s:g}"] if heartbeat_s else []
    urls = redis_urls or {}
    return [
        ChildSpec(f"agent-{agent.agent_id}",
                  cardflow_argv("agent", "--id", agent.agent_id, "--sim", agent.sim, "--time-scale", f"{time_scale:g}", *extra),
                  {"CARDFLOW_REDIS_URL": urls[agent.agent_id]} if agent.agent_id in urls else {})
        for agent in fleet
    ]  # fmt: skip


def own_backend_env(endpoints: Endpoints, names: Sequence[str]) -> dict[str, dict[str, str]]:
    """Each service (and `console`) with its own Redis user (shared.redis_acl) and PostgreSQL role
    (shared.pg_roles); the configured URLs where the backends are not embedded."""
    user = lambda name: "gate" if name == "gate" else f"service.{name}"  # noqa: E731
    return {
        name: {"CARDFLOW_REDIS_URL": endpoints.redis_url_for(user(name)), "CARDFLOW_DATABASE_URL": endpoints.database_url_for(name)}
        for name in names
    }


def enrolment_env(endpoints: Endpoints) -> dict[str, str]:
    """The console's right to make agents' Redis users (POST /v1/agents): on the embedded Redis only,
    whose admin URL `cardflow up` holds anyway; an external Redis's admin URL is the operator's to give."""
    return {"CARDFLOW_AGENT_ENROLMENT_REDIS_URL": endpoints.redis_url} if endpoints.redis_users_file else {}


def enrolled_fleet(endpoints: Endpoints, fleet: Sequence[DemoAgent]) -> dict[str, str]:
    """Agent id -> the URL of its own Redis user, enrolled now (embedded Redis only; else {})."""
    if not endpoints.redis_users_file or not endpoints.data_dir:
        return {}
    from shared.embedded.redis_users import enroll
    from shared.redis_acl import agent_user

    return {agent.agent_id: enroll(endpoints.redis_url, Path(endpoints.data_dir), agent_user(agent.agent_id)) for agent in fleet}


def console_port(preferred: int = PREFERRED_CONSOLE_PORT) -> int:
    """`preferred` when it is free, else any free port."""
    return preferred if _is_free(preferred) else free_ports(1)[0]


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((CONSOLE_HOST, port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def run_cardflow(endpoints: Endpoints, demo: bool, console: Console, lang: CliLang = CliLang.EN) -> Iterator[Supervisor]:
    """Steps 1-3 of the module docstring (`lang`: of what is printed here and of the demo's live view)."""
    words = SYSTEM_WORDS[lang]
    data_dir = Path(endpoints.data_dir or ".cardflow")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request (console polls, the demo's reviewer)
    port = console_port()
    url = f"http://{CONSOLE_HOST}:{port}"
    workload = build_workload(new_event_id()[-6:].lower()) if demo else None
    scale = demo_time_scale(workload.to_run, DEMO_FLEET, load_catalog()) if workload else 1.0
    # The config service records the demo's policy as a change by system:demo (a start without --demo
    # takes it back); the dispatcher's knobs only matter until that version is in force.
    service_env = own_backend_env(endpoints, [*SERVICE_NAMES, "console"])
    service_env["console"] |= enrolment_env(endpoints)
    if demo:
        service_env["dispatcher"] |= demo_dispatcher_env(scale)
        service_env["config"] |= demo_config_env(scale)
    with Supervisor(data_dir / "logs", env=endpoints.as_env(), on_notice=_printer(console, demo, lang)) as supervisor:
        supervisor.start([*service_children(env=service_env), console_child(port, env=service_env["console"])])
        if not wait_for_console(url, CONSOLE_START_TIMEOUT_S):
            console.print(f"[yellow]{words['no_console'].format(s=CONSOLE_START_TIMEOUT_S, log=supervisor.log_path('console'))}[/yellow]")
        token_file = local_token_path(data_dir)
        write_instance_api(data_dir, url, token_file)
        console.print(words["started"].format(logs=supervisor.log_dir, url=url))
        console.print(words["sign_in"].format(link=login_link(url, token_file)), soft_wrap=True)
        if workload is None:
            yield supervisor
            return
        supervisor.start(agent_children(DEMO_FLEET, scale, redis_urls=enrolled_fleet(endpoints, DEMO_FLEET)))
        options = DemoOptions(time_scale=scale, console_url=url, logs=str(supervisor.log_dir),
                              fleet=tuple(agent.agent_id for agent in DEMO_FLEET), admin_token_file=str(token_file), lang=lang)
        with DemoRunner(endpoints.settings(), workload, options, console, supervisor):
            yield supervisor


def login_link(url: str, token_file: Path) -> str:
    """`<url>/login?token=...`: opening it signs the browser in with the local admin token (like
    Jupyter's link); the page keeps the token in an HttpOnly cookie and drops it from the address."""
    return f"{url}/login?{urlencode({'token': token_file.read_text().strip()})}"


def wait_for_console(url: str, timeout_s: float) -> bool:
    """Poll the console's /healthz until it answers 200 (True) or `timeout_s` passes (False)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=2.0).status_code == 200:
                return True
        time.sleep(0.2)
    return False


def _printer(console: Console, demo: bool, lang: CliLang) -> Callable[[Notice], None]:
    """Without the live view, print exits (and the restart back-off) as they happen; the view shows them itself."""

    def show(notice: Notice) -> None:
        if not demo and notice.is_exit:
            console.print(f"[yellow]{notice.child}[/yellow]: {notice.text(lang)}")

    return show
