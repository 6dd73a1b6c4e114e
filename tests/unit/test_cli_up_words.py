"""`cardflow up --lang zh`: its table of backends in Chinese (pure: the table from made-up endpoints;
`tests/integration/test_embedded_cli.py` runs `up` itself, in English, which scripts wait for)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from services.cli.backends import UP_WORDS, _where_table
from services.cli.lang import CliLang
from services.identity.bootstrap import LocalAdmin
from shared.embedded import Endpoints

ENDPOINTS = Endpoints(redis_url="redis://:pw@127.0.0.1:6390/0", database_url="postgresql://u:pw@127.0.0.1:5439/cardflow",
                      s3_endpoint="http://127.0.0.1:8339", s3_access_key="ak", s3_secret_key="sk", data_dir="/tmp/cf")  # fmt: skip
ADMIN = LocalAdmin(path=Path("/tmp/cf/admin.token"), name="ana", created=True)


def rendered(lang: CliLang) -> str:
    console = Console(record=True, width=200)
    console.print(_where_table(ENDPOINTS, ["redis", "postgres"], ADMIN, UP_WORDS[lang]))
    return " ".join(console.export_text().split())


def test_the_backends_table_in_english_and_chinese() -> None:
    english = rendered(CliLang.EN)
    assert "cardflow backends (data dir /tmp/cf)" in english and "embedded" in english and "created now" in english
    chinese = rendered(CliLang.ZH)
    assert "cardflow 后端（数据目录 /tmp/cf）" in chinese and "内嵌" in chinese and "外部（来自 CARDFLOW_*）" in chinese
    assert "管理员令牌" in chinese and "刚创建" in chinese and "pw@" not in chinese


def test_up_hands_its_language_to_every_system_part(monkeypatch) -> None:
    from contextlib import ExitStack, nullcontext

    from services.cli import backends

    seen = []
    monkeypatch.setattr(backends, "SYSTEM_PARTS", [lambda endpoints, demo, lang: seen.append((demo, lang)) or nullcontext()])
    with ExitStack() as stack:
        backends.run_system(ENDPOINTS, True, stack, CliLang.ZH)
    assert seen == [(True, CliLang.ZH)]  # the demo part passes it on to DemoOptions.lang (services/demo/system.py)
