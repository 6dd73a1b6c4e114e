"""`cardflow token ...` and `cardflow whoami` as a user runs them: API clients of a served console."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner, Result

from services.cli.main import app
from shared.settings import Settings, get_settings
from tests.helpers.console_server import serving_console

runner = CliRunner()
CLEARED = ("CARDFLOW_API_URL", "CARDFLOW_TOKEN", "CARDFLOW_TOKEN_FILE", "CARDFLOW_DATABASE_URL", "CARDFLOW_REDIS_URL")


def cardflow(*args: str, **env: str) -> Result:
    """Run `cardflow ARGS` in this process with exactly `env` among the CARDFLOW_* variables it reads."""
    environment: dict[str, str | None] = {key: None for key in CLEARED} | {"COLUMNS": "200"} | env
    return runner.invoke(app, list(args), env=environment)


def test_token_commands_through_the_api(fresh_settings: Settings, tmp_path: Path) -> None:
    dsn = fresh_settings.database_dsn or ""
    boot = cardflow("token", "bootstrap", "root", "--reason", "first admin", CARDFLOW_DATABASE_URL=dsn,
                    CARDFLOW_DATA_DIR=str(tmp_path))  # fmt: skip
    assert boot.exit_code == 0, boot.output
    root = boot.stdout.strip()
    assert root.startswith("cfk_") and "shown only now" in boot.stderr
    again = cardflow("token", "bootstrap", "mallory", "--lang", "zh", CARDFLOW_DATABASE_URL=dsn, CARDFLOW_DATA_DIR=str(tmp_path))
    assert again.exit_code == 1 and "错误：" in again.stderr and "an active admin token exists already" in again.stderr

    with serving_console(fresh_settings) as url:
        made = cardflow("token", "create", "alice", "--role", "submitter", "--project", "nlp", "--reason", "joins",
                        CARDFLOW_API_URL=url, CARDFLOW_TOKEN=root)  # fmt: skip
        assert made.exit_code == 0, made.output
        alice = made.stdout.strip()
        token_file = tmp_path / "alice.token"
        token_file.write_text(alice + "\n")

        me = cardflow("whoami", CARDFLOW_API_URL=url, CARDFLOW_TOKEN_FILE=str(token_file))
        assert me.exit_code == 0 and "user:alice: role submitter for project nlp" in me.stdout
        me_zh = cardflow("whoami", "--lang", "zh", CARDFLOW_API_URL=url, CARDFLOW_TOKEN_FILE=str(token_file))
        assert me_zh.exit_code == 0 and "user:alice：角色 提交者 (submitter)，限项目 nlp" in me_zh.stdout, me_zh.output
        bob = cardflow("token", "create", "bob", "--role", "reviewer", "--lang", "zh", CARDFLOW_API_URL=url, CARDFLOW_TOKEN=root)
        assert bob.exit_code == 0 and "已为 bob 创建令牌" in bob.stderr and "审批人 (reviewer)" in bob.stderr, bob.output

        refused = cardflow("token", "create", "eve", "--role", "admin", CARDFLOW_API_URL=url, CARDFLOW_TOKEN=alice)
        assert refused.exit_code == 3
        assert refused.stderr == (
            "error: forbidden: this needs role admin; token 'alice' (submitter for project nlp) does not have it\n"
        )
        anonymous = cardflow("token", "list", CARDFLOW_API_URL=url)
        assert anonymous.exit_code == 3 and "no token configured: set CARDFLOW_TOKEN" in anonymous.stderr
        assert anonymous.stderr.count("\n") == 1

        listed = cardflow("token", "list", CARDFLOW_API_URL=url, CARDFLOW_TOKEN=root)
        assert listed.exit_code == 0 and "alice" in listed.stdout and "submitter" in listed.stdout
        assert alice not in listed.stdout and root not in listed.stdout
        listed_zh = cardflow("token", "list", "--lang", "zh", CARDFLOW_API_URL=url, CARDFLOW_TOKEN=root)
        assert "API 令牌（3 个）" in listed_zh.stdout and "提交者" in listed_zh.stdout and "角色" in listed_zh.stdout

        revoked = cardflow("token", "revoke", "alice", "--reason", "left", CARDFLOW_API_URL=url, CARDFLOW_TOKEN=root)
        assert revoked.exit_code == 0 and "revoked token" in revoked.stdout
        revoked_zh = cardflow("token", "revoke", "bob", "--reason", "done", "--lang", "zh", CARDFLOW_API_URL=url, CARDFLOW_TOKEN=root)
        assert revoked_zh.exit_code == 0 and "已吊销 bob 的令牌" in revoked_zh.stdout, revoked_zh.output
        after = cardflow("whoami", CARDFLOW_API_URL=url, CARDFLOW_TOKEN=alice)
        assert after.exit_code == 3 and "the token is not valid" in after.stderr

    gone = cardflow("whoami", CARDFLOW_API_URL=url, CARDFLOW_TOKEN=root)
    assert gone.exit_code == 1 and f"cannot reach the cardflow API at {url}" in gone.stderr
    gone_zh = cardflow("whoami", "--lang", "zh", CARDFLOW_API_URL=url, CARDFLOW_TOKEN=root)
    assert gone_zh.exit_code == 1 and gone_zh.stderr.startswith(f"错误：无法连接 {url} 上的 cardflow API"), gone_zh.stderr


def test_without_an_api_the_cli_says_where_it_looked(tmp_path: Path) -> None:
    result = cardflow("whoami", CARDFLOW_DATA_DIR=str(tmp_path))
    assert result.exit_code == 1
    assert "no cardflow API to talk to" in result.stderr and str(tmp_path) in result.stderr
    in_chinese = cardflow("whoami", "--lang", "zh", CARDFLOW_DATA_DIR=str(tmp_path))
    assert in_chinese.exit_code == 1 and "找不到可用的 cardflow API" in in_chinese.stderr and str(tmp_path) in in_chinese.stderr
    get_settings.cache_clear()  # token bootstrap reads the settings: this call's environment, not an earlier test's
    no_database = cardflow("token", "bootstrap", "root", "--lang", "zh", CARDFLOW_DATA_DIR=str(tmp_path))
    get_settings.cache_clear()
    assert no_database.exit_code == 1 and "没有已配置或运行中的 cardflow 实例" in no_database.stderr, no_database.output
