"""The CLI's way into the running system: the HTTP API, with the caller's token.

    with cli_api() as api:
        rows = api.get("/v1/ledger", by="project")                  # JSON of a 2xx answer
        answer = api.post("/v1/quotas", {"project": "nlp", ...})
        response = api.call("POST", "/v1/tasks", body=raw, expect=(422,))   # handle 422 yourself

Where the API is: `CARDFLOW_API_URL`; else the console of the instance `cardflow up` runs on the
data dir (`<data_dir>/run/api.env`). Whose token: `CARDFLOW_TOKEN`; else the file `CARDFLOW_TOKEN_FILE`
names; else, only when the API was found through the data dir, that instance's admin token file.
`eval "$(cardflow endpoints)"` sets the URL and the token file.

Any failure leaves `cli_api()` as ONE line on stderr and an exit code: 401 names the token problem,
403 the missing role (the API's sentence), an unreachable API says where it looked. `cli_api(lang)`
says the client's own sentences in the command's language (`--lang zh`); the API's detail stays the
API's.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from services.cli.lang import CliLang

if TYPE_CHECKING:
    import httpx

ENV_API_URL = "CARDFLOW_API_URL"
ENV_TOKEN = "CARDFLOW_TOKEN"
ENV_TOKEN_FILE = "CARDFLOW_TOKEN_FILE"

EXIT_FAILED = 1
EXIT_REFUSED = 3
"""401 or 403: the token is missing or not valid, or its role may not do this."""

TIMEOUT_S = 60.0

errors = Console(stderr=True, soft_wrap=True)


CLIENT_WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {
        "error": "error: ",
        "no_api": "no cardflow API to talk to: set {url_var} and {token_var} (eval \"$(cardflow endpoints)\" does it for a"
                  " local instance), or start one with `cardflow up` (looked for a running instance on data dir {data_dir})",
        "token_file": "cannot read the token file {path} ({file_var}): {why}",
        "unreachable": "cannot reach the cardflow API at {url} ({error}); is `cardflow up` or `cardflow console` running there?",
        "no_token": "{detail} (no token configured: set {token_var} or {file_var})",
        "failed": "{detail} (HTTP {status} from {method} {path})", "refused": "{detail}",
    },
    CliLang.ZH: {
        "error": "错误：",
        "no_api": "找不到可用的 cardflow API：请设置 {url_var} 和 {token_var}（本机实例可用 eval \"$(cardflow endpoints)\" 设置），"
                  "或用 `cardflow up` 启动一个（已在数据目录 {data_dir} 查找运行中的实例）",
        "token_file": "无法读取令牌文件 {path}（{file_var}）：{why}（原文）",
        "unreachable": "无法连接 {url} 上的 cardflow API（{error}，原文）；那里是否在运行 `cardflow up` 或 `cardflow console`？",
        "no_token": "{detail}（未配置令牌：请设置 {token_var} 或 {file_var}）",
        "failed": "{detail}（{method} {path} 返回 HTTP {status}）", "refused": "{detail}",
    },
}  # fmt: skip
"""The client's own sentences; `{detail}` is the API's (kept as it is)."""


class ApiError(Exception):
    """A request that did not succeed: the sentence `said` of `CLIENT_WORDS` with its facts; `str()` is
    the English line, `line(lang)` the line the CLI prints."""

    def __init__(self, said: str, facts: Mapping[str, Any], exit_code: int = EXIT_FAILED, status: int | None = None) -> None:
        super().__init__(CLIENT_WORDS[CliLang.EN][said].format(**facts))
        self.said, self.facts, self.exit_code, self.status = said, dict(facts), exit_code, status

    def line(self, lang: CliLang = CliLang.EN) -> str:
        return CLIENT_WORDS[lang][self.said].format(**self.facts)


@dataclass(frozen=True)
class ApiTarget:
    """Where requests go and with which token (`token_source` says where the token came from)."""

    url: str
    token: str | None
    token_source: str


def write_instance_api(data_dir: Path | str, url: str, token_file: Path) -> Path:
    """Record a running instance's API URL and admin token file (no secret: the file holds the token)."""
    from shared.embedded.credentials import write_private
    from shared.embedded.state import Layout

    path = Layout.of(data_dir).api_file
    write_private(path, f"export {ENV_API_URL}={shlex.quote(url)}\nexport {ENV_TOKEN_FILE}={shlex.quote(str(token_file))}\n")
    return path


def read_instance_api(data_dir: Path | str) -> dict[str, str] | None:
    """The API variables of the instance running on `data_dir`, or None (none runs, or it has no console yet)."""
    from shared.embedded.state import Layout, is_instance_running

    layout = Layout.of(data_dir)
    path = layout.api_file
    if not is_instance_running(layout) or not path.exists():
        return None
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            key, value = words[1].split("=", 1)
            found[key] = value
    return found if ENV_API_URL in found else None


def resolve_target(env: Mapping[str, str] | None = None, data_dir: Path | str | None = None) -> ApiTarget:
    """Where the API is and the caller's token (module docstring); ApiError when no API is configured."""
    env = os.environ if env is None else env
    data_dir = data_dir or env.get("CARDFLOW_DATA_DIR") or ".cardflow"
    instance = None if env.get(ENV_API_URL) else read_instance_api(data_dir)
    url = env.get(ENV_API_URL) or (instance or {}).get(ENV_API_URL)
    if not url:
        raise ApiError("no_api", {"url_var": ENV_API_URL, "token_var": ENV_TOKEN, "data_dir": data_dir})
    if env.get(ENV_TOKEN):
        return ApiTarget(url.rstrip("/"), env[ENV_TOKEN].strip(), ENV_TOKEN)
    token_file = env.get(ENV_TOKEN_FILE) or (instance or {}).get(ENV_TOKEN_FILE)
    if token_file:
        return ApiTarget(url.rstrip("/"), _read_token_file(Path(token_file)), f"token file {token_file}")
    return ApiTarget(url.rstrip("/"), None, "none")


def _read_token_file(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise ApiError("token_file", {"path": path, "file_var": ENV_TOKEN_FILE, "why": exc.strerror}) from None


class ApiClient:
    """Requests to the API with the caller's bearer token; non-success answers raise `ApiError`."""

    def __init__(self, target: ApiTarget, http: httpx.Client) -> None:
        self.target, self._http = target, http

    def call(self, method: str, path: str, *, body: Any = None, params: Mapping[str, Any] | None = None,
             expect: tuple[int, ...] = ()) -> httpx.Response:  # fmt: skip
        """Send one request; the response if it succeeded (2xx) or its status is in `expect`."""
        import httpx

        query = {key: value for key, value in (params or {}).items() if value is not None}
        try:
            response = self._http.request(method, path, json=body, params=query or None)  # an empty mapping would drop a query written in `path`
        except httpx.HTTPError as exc:
            raise ApiError("unreachable", {"url": self.target.url, "error": f"{type(exc).__name__}: {exc}"}) from None
        if response.is_success or response.status_code in expect:
            return response
        raise self._error(response)

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params=params).json()

    def post(self, path: str, body: Any = None) -> Any:
        return self.call("POST", path, body=body).json()

    def _error(self, response: httpx.Response) -> ApiError:
        detail = detail_of(response)
        status = response.status_code
        if status in (401, 403):
            said = "refused" if status == 403 or self.target.token else "no_token"
            return ApiError(said, {"detail": detail, "token_var": ENV_TOKEN, "file_var": ENV_TOKEN_FILE}, EXIT_REFUSED, status)
        facts = {"detail": detail, "status": status, "method": response.request.method, "path": response.request.url.path}
        return ApiError("failed", facts, EXIT_FAILED, status)


def detail_of(response: httpx.Response) -> str:
    """The sentence of an error answer: FastAPI's `detail` (text, or the validation errors in one line)."""
    try:
        detail = response.json().get("detail")
    except ValueError:
        return response.text.strip()[:300] or response.reason_phrase
    if isinstance(detail, list):  # request validation: [{loc, msg, ...}]
        return "invalid request: " + "; ".join(
            f"{'.'.join(str(p) for p in item.get('loc', ())[1:]) or 'body'}: {item.get('msg')}" for item in detail
        )
    return str(detail or response.reason_phrase)


@contextlib.contextmanager
def api_client(target: ApiTarget | None = None) -> Iterator[ApiClient]:
    """An `ApiClient` on `target` (default: `resolve_target()`); errors propagate as `ApiError`."""
    import httpx

    target = target or resolve_target()
    headers = {"authorization": f"Bearer {target.token}"} if target.token else {}
    with httpx.Client(base_url=target.url, headers=headers, timeout=TIMEOUT_S) as http:
        yield ApiClient(target, http)


@contextlib.contextmanager
def cli_api(lang: CliLang | str = CliLang.EN) -> Iterator[ApiClient]:
    """`api_client()` for a CLI command: an `ApiError` ends the command with `error: <line>` (in the
    command's language) and its exit code."""
    lang = CliLang(str(lang))
    try:
        with api_client() as api:
            yield api
    except ApiError as exc:
        from rich.markup import escape

        errors.print(f"[red]{CLIENT_WORDS[lang]['error']}[/red]{escape(exc.line(lang))}", highlight=False)
        raise typer.Exit(exc.exit_code) from None
