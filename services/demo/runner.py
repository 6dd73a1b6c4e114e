"""The demo run: submit the workload through `cf:ingest`, make data ready later, show it live.

`DemoRunner` runs on its own thread (with its own event loop) so `cardflow up` keeps its main
thread for signals:

1. create the demo bucket, grant the demo's quota accounts (`DEMO_QUOTAS`, once per data
   dir: an account that exists is kept) and write its submission templates (`DEMO_TEMPLATES`,
   version 1 by `system:demo` when missing: a template an operator changed is kept); get the
   demo reviewer's token through the identity API (`services.demo.reviewer`); follow `cf:events`
   into a `Board` under a live view (redrawn four times a second) until every demo agent has
   registered, so tasks are matched against the whole fleet, and the demo's policy (its approval
   rule) is in force; then submit every task and the invalid submission (one XADD each);
2. carry out each delayed data action when its time comes (upload an object / a `_READY`
   marker, send `data.ready`), and each of the reviewer's decisions once its task has waited for
   approval a moment (`DEMO_REVIEWS`: approve one, deny one, each with a reason);
3. once every demo task is settled (terminal, or unmatchable) and the ledger has charged what
   each project's ended leases held (`Board.ledger_caught_up`; or `ledger_wait_s` has passed), stop the
   live view and print the summary;
4. stay idle until stopped (Ctrl-C): the system keeps running.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
from redis.asyncio import Redis
from rich.console import Console
from rich.live import Live

from services.demo.board import Board
from services.cli.lang import CliLang
from services.demo.render import DEMO_WORDS, Header, live_view, plain_status, summary
from services.demo.reviewer import REVIEWER_TOKEN_FILE, DemoReviewer, demo_reviewer_token, policy_in_force
from services.demo.supervisor import Supervisor
from services.demo.tail import EventTail
from services.demo.upstream import perform, submit
from services.demo.workload import DEMO_BUCKET, DEMO_QUOTAS, DEMO_TEMPLATES, DemoWorkload, wire_form
from shared.cards import load_catalog
from shared.settings import Settings
from shared.storage import ObjectStore, open_data_store


@dataclass
class DemoOptions:
    time_scale: float
    console_url: str
    logs: str
    fleet: tuple[str, ...] = ()  # agent ids to wait for before submitting
    fleet_wait_s: float = 60.0
    settle_timeout_s: float = 240.0
    ledger_wait_s: float = 15.0
    refresh_s: float = 0.25
    admin_token_file: str | None = None  # the local admin's token: makes the demo reviewer's token
    lang: CliLang = CliLang.EN  # of the live view, the notes and the summary (`cardflow up --demo --lang zh`)


@dataclass
class DemoProgress:
    """Where the run is; read by the tests and the summary."""

    submitted: int = 0
    notes: list[str] = field(default_factory=list)
    settled_after_s: float | None = None
    finished: threading.Event = field(default_factory=threading.Event)


class DemoRunner:
    """Runs `run_demo` on a thread; leaving the `with` block stops it (the live view first)."""

    def __init__(self, settings: Settings, workload: DemoWorkload, options: DemoOptions, console: Console,
                 supervisor: Supervisor | None = None) -> None:  # fmt: skip
        self.settings, self.workload, self.options, self.console = settings, workload, options, console
        self.supervisor = supervisor
        self.progress = DemoProgress()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="cardflow-demo", daemon=True)

    def __enter__(self) -> DemoRunner:
        self._thread.start()
        self._ready.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()

    def _main(self) -> None:
        async def main() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            self._ready.set()
            try:
                await run_demo(self.settings, self.workload, self.options, self.console, self._stop,
                               self.progress, self.supervisor)  # fmt: skip
            finally:
                self.progress.finished.set()

        try:
            asyncio.run(main())
        except Exception as exc:  # the demo failing must not take the system down with it
            self.console.print(f"[red]demo stopped:[/red] {type(exc).__name__}: {exc}")
        finally:
            self._ready.set()


async def run_demo(settings: Settings, workload: DemoWorkload, options: DemoOptions, console: Console,
                   stop: asyncio.Event, progress: DemoProgress, supervisor: Supervisor | None = None) -> None:  # fmt: skip
    """Steps 1-4 of the module docstring."""
    redis = Redis.from_url(settings.redis_url or "")
    api = httpx.AsyncClient(base_url=options.console_url, timeout=15.0)
    try:
        await grant_demo_quotas(settings)
        await write_demo_templates(settings)
        reviewer = await _demo_reviewer(api, options, progress)
        async with open_data_store(settings) as store:  # the demo's input data, in a bucket of "its users"
            await store.ensure_bucket(DEMO_BUCKET)
            session = DemoSession(redis, store, Board(load_catalog()), workload, options, progress, reviewer)
            await _follow(session, console, stop, supervisor)
            if not stop.is_set():
                console.print(summary(session.board, workload.keys, time_scale=options.time_scale, lang=options.lang))
                _print_outcome(console, progress, options)
        await stop.wait()
    finally:
        await api.aclose()
        await redis.aclose()


async def _demo_reviewer(api: httpx.AsyncClient, options: DemoOptions, progress: DemoProgress) -> DemoReviewer | None:
    """The demo's reviewer with its token (see `services.demo.reviewer`); None (with a note) when it cannot be had."""
    if options.admin_token_file is None:
        return None
    admin_file = Path(options.admin_token_file)
    try:
        token = await demo_reviewer_token(api, admin_file.read_text().strip(), admin_file.with_name(REVIEWER_TOKEN_FILE))
    except (httpx.HTTPError, OSError, KeyError) as exc:
        progress.notes.append(DEMO_WORDS[options.lang]["no_reviewer"].format(error=f"{type(exc).__name__}: {exc}"))
        return None
    return DemoReviewer(api, token, lang=options.lang)


async def grant_demo_quotas(settings: Settings) -> None:
    """Grant each `DEMO_QUOTAS` account that does not exist yet, with its `quota.granted` event."""
    from datetime import UTC, datetime, timedelta

    from services.common.runtime import Emitter, prepare_schema
    from services.ledger.quotas import grant_quota
    from services.ledger.service import SPEC as LEDGER
    from shared.delivery.db import create_pool

    pool = await create_pool(settings.database_dsn or "", min_size=1, max_size=2)
    try:
        await prepare_schema(pool, LEDGER)
        now = datetime.now(UTC)
        emitter = Emitter(LEDGER.schema, "demo", "system:demo")
        async with pool.acquire() as conn, conn.transaction():
            existing = {r["account_id"] for r in await conn.fetch(f"SELECT account_id FROM {LEDGER.schema}.quotas")}
            for quota in DEMO_QUOTAS:
                if quota.account_id not in existing:
                    await grant_quota(conn, emitter, project=quota.project, gpu_hours=quota.gpu_hours, valid_from=now,
                                      valid_to=now + timedelta(days=quota.valid_days), account_id=quota.account_id,
                                      alert_lead_days=quota.alert_lead_days)  # fmt: skip
    finally:
        await pool.close()


async def write_demo_templates(settings: Settings) -> list[str]:
    """Write version 1 of each `DEMO_TEMPLATES` that does not exist yet (actor `system:demo`),
    before the workload that names them is sent; the names written."""
    from services.common.runtime import prepare_schema
    from services.config.service import SPEC as CONFIG
    from services.config.service import open_config_store
    from services.config.store import StaleBaseError
    from shared.config import template_document, validate_document
    from shared.config.demo_policy import DEMO_ACTOR
    from shared.delivery.db import create_pool
    from shared.events.config import ConfigAction

    written = []
    pool = await create_pool(settings.database_dsn or "", min_size=1, max_size=2)
    try:
        await prepare_schema(pool, CONFIG)
        async with contextlib.AsyncExitStack() as resources:
            store = await open_config_store(pool, settings, "demo", resources)
            if store is None:
                return written
            for template in DEMO_TEMPLATES:
                name = template_document(template.name)
                if await store.head(name) is not None:
                    continue
                with contextlib.suppress(StaleBaseError):  # another demo start wrote it meanwhile
                    await store.change(validate_document(name, template.text()), base=None, action=ConfigAction.APPLIED,
                                       actor=DEMO_ACTOR, reason=f"cardflow up --demo: the demo's template ({template.description})",
                                       first_only=True)  # fmt: skip
                    written.append(template.name)
    finally:
        await pool.close()
    return written


class DemoSession:
    """One demo run's state, advanced by `step()` a few times a second."""

    def __init__(self, redis: Redis, store: ObjectStore, board: Board, workload: DemoWorkload, options: DemoOptions,
                 progress: DemoProgress, reviewer: DemoReviewer | None = None) -> None:  # fmt: skip
        self.redis, self.store, self.board, self.workload = redis, store, board, workload
        self.options, self.progress, self.reviewer = options, progress, reviewer
        self.policy_ready = reviewer is None  # without a reviewer there is nobody to wait for
        self.tail = EventTail(redis)
        self.started = time.monotonic()
        self.submitted_at: float | None = None
        self.actions = sorted(workload.data_actions, key=lambda a: a.after_s)

    async def step(self) -> bool:
        """Read new events, submit once the fleet is there, do the data actions that are due; True when done."""
        self.board.apply_all(await self.tail.read(block_ms=int(self.options.refresh_s * 1000)))
        now = time.monotonic()
        if self.submitted_at is None and (await self.ready_to_submit() or now - self.started >= self.options.fleet_wait_s):
            await self.submit_workload()
        if self.submitted_at is None:
            return False
        elapsed = now - self.submitted_at
        while self.actions and self.actions[0].after_s <= elapsed:
            done = await perform(self.actions.pop(0), self.redis, self.store, self.options.lang)
            self.progress.notes.append(f"t={elapsed:.0f}s {done}")
        if self.reviewer is not None:
            for note in await self.reviewer.step(self.board.views_of(self.workload.keys), now):
                self.progress.notes.append(f"t={elapsed:.0f}s {note}")
        return _is_done(self.board, self.workload, self.progress, elapsed, self.options)

    async def ready_to_submit(self) -> bool:
        """The whole fleet registered and the demo's policy (its approval rule) in force."""
        if not self.fleet_is_up():
            return False
        if not self.policy_ready and self.reviewer is not None:
            with contextlib.suppress(httpx.HTTPError):
                self.policy_ready = await policy_in_force(self.reviewer.api, self.reviewer.token)
        return self.policy_ready

    def fleet_is_up(self) -> bool:
        """Every demo agent registered: tasks are then matched against the whole fleet."""
        registered = {node.agent_id for node in self.board.nodes.values()}
        return set(self.options.fleet) <= registered

    async def submit_workload(self) -> None:
        sent = [*map(wire_form, self.workload.submissions), *self.workload.invalid]
        self.progress.submitted = len(await submit(self.redis, sent))
        self.submitted_at = time.monotonic()
        count = len(self.workload.submissions) + len(self.workload.invalid)
        self.progress.notes.append(DEMO_WORDS[self.options.lang]["submitted"].format(n=count))


async def _follow(session: DemoSession, console: Console, stop: asyncio.Event, supervisor: Supervisor | None) -> None:
    """Steps 2-3: step the session under a live view until the demo is done (or stopped); plain
    lines instead when the output is not a terminal (a pipe, a file, CI)."""
    if not console.is_terminal:
        await _follow_plain(session, console, stop, supervisor)
        return
    options = session.options
    header = Header(session.workload.run_id, options.time_scale, options.console_url, session.started, options.logs)
    render = _renderer(session.board, supervisor, console, options.lang)
    with Live(render(header), console=console, refresh_per_second=1 / options.refresh_s,
              redirect_stdout=False, redirect_stderr=False) as live:  # fmt: skip
        while not stop.is_set():
            done = await session.step()
            live.update(render(replace(header, notes=tuple(session.progress.notes))))
            if done:
                return


async def _follow_plain(session: DemoSession, console: Console, stop: asyncio.Event,
                        supervisor: Supervisor | None) -> None:  # fmt: skip
    """Like `_follow`, printing one line whenever the counts change, and each note and process exit once."""
    printed_status, printed_notes, seen_notices = "", 0, len(supervisor.notices) if supervisor else 0
    while not stop.is_set():
        done = await session.step()
        elapsed = time.monotonic() - session.started
        for note in session.progress.notes[printed_notes:]:
            console.print(note, markup=False, highlight=False)
        printed_notes = len(session.progress.notes)
        notices = list(supervisor.notices) if supervisor else []
        for notice in notices[seen_notices:]:
            if notice.is_exit:
                console.print(f"{notice.child}: {notice.text(session.options.lang)}", markup=False, highlight=False)
        seen_notices = len(notices)
        status = plain_status(session.board, session.options.lang)
        if status != printed_status:
            console.print(f"{elapsed:4.0f}s  {status}", markup=False, highlight=False)
            printed_status = status
        if done:
            return


def _renderer(board: Board, supervisor: Supervisor | None, console: Console, lang: CliLang) -> Callable[[Header], object]:
    def render(header: Header) -> object:
        children = supervisor.status() if supervisor else []
        notices = list(supervisor.notices) if supervisor else []
        rows = max(3, console.height - 18 - len(board.fleet()))  # the rest of the screen is taken
        return live_view(board, header, children, notices, recent=rows, lang=lang)

    return render


def _is_done(board: Board, workload: DemoWorkload, progress: DemoProgress, elapsed: float, options: DemoOptions) -> bool:
    """Settled and charged (or waited long enough for the ledger), or out of time."""
    if progress.settled_after_s is None and board.is_settled(workload.keys):
        progress.settled_after_s = elapsed
    if progress.settled_after_s is None:
        return elapsed >= options.settle_timeout_s
    return board.ledger_caught_up() or elapsed - progress.settled_after_s >= options.ledger_wait_s


def _print_outcome(console: Console, progress: DemoProgress, options: DemoOptions) -> None:
    words = DEMO_WORDS[options.lang]
    if progress.settled_after_s is None:
        console.print(f"[yellow]{words['not_settled'].format(s=options.settle_timeout_s, logs=options.logs)}[/yellow]")
    else:
        console.print(f"[green]{words['settled'].format(s=progress.settled_after_s)}[/green] "
                      f"{words['keeps_running'].format(scale=options.time_scale)}")  # fmt: skip
    console.print(words["console_line"].format(url=options.console_url))
