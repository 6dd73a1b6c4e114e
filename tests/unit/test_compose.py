"""docker-compose.yml and Dockerfile: structure checks (no Docker engine needed)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from typer.main import get_command

from services.cli.main import app
from shared.pg_roles import SERVICE_ROLES, role_name
from shared.process_logins import ProcessLogin, process_logins, service_login
from shared.redis_acl import admin_file_line, agent_user, system_users

REPO = Path(__file__).resolve().parents[2]
COMPOSE_TEXT = (REPO / "docker-compose.yml").read_text()
COMPOSE: dict[str, Any] = yaml.safe_load(COMPOSE_TEXT)
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]

BACKENDS = {"redis", "postgres", "s3"}
SETUP = "setup"  # the one-shot container that makes every process's Redis user and PostgreSQL role
CARDFLOW_SERVICES = ["config", "intake", "readiness", "matcher", "dispatcher", "ledger", "views", "gate"]
ADMIN_PASSWORDS = ("CARDFLOW_REDIS_ADMIN_PASSWORD", "CARDFLOW_POSTGRES_ADMIN_PASSWORD")
REQUIRED_ENV = [
    "CARDFLOW_REDIS_URL",
    "CARDFLOW_DATABASE_URL",
    "CARDFLOW_S3_ENDPOINT",
    "CARDFLOW_S3_ACCESS_KEY",
    "CARDFLOW_S3_SECRET_KEY",
    "CARDFLOW_S3_REGION",
    "CARDFLOW_S3_ADDRESSING_STYLE",
]
# Commands the compose file runs that are not registered in the CLI yet. Remove a name when its
# command lands: the last test fails while a listed command already exists.
PENDING_COMMANDS: set[str] = set()

APP_CONTAINERS = {name: spec for name, spec in SERVICES.items() if name not in BACKENDS}
PROCESS_CONTAINERS = {name: spec for name, spec in APP_CONTAINERS.items() if name != SETUP}
SERVICE_CONTAINERS = {name: spec for name, spec in PROCESS_CONTAINERS.items() if spec["command"][1] != "agent"}


def interpolate(value: str, env: dict[str, str]) -> str:
    """Docker Compose's variable interpolation: ${VAR}, ${VAR:-default}, ${VAR:?error}, $$."""

    def substitute(match: re.Match[str]) -> str:
        name, operator, argument = match.group(1), match.group(2), match.group(3)
        if env.get(name):
            return env[name]
        if operator == ":?":
            raise KeyError(f"{name} is required: {argument}")
        return argument if operator == ":-" else ""

    return re.sub(r"\$\{([A-Za-z0-9_]+)(?:(:[?-])([^}]*))?\}", substitute, value.replace("$$", "\0")).replace("\0", "$")


COMPOSE_CODE = "\n".join(line for line in COMPOSE_TEXT.splitlines() if not line.lstrip().startswith("#"))
REQUIRED_VARIABLES = sorted(set(re.findall(r"\$\{([A-Za-z0-9_]+):\?", COMPOSE_CODE)))
SENTINELS = {name: f"from-env-{name.lower()}" for name in REQUIRED_VARIABLES}


def resolved_env(spec: dict[str, Any]) -> dict[str, str]:
    return {key: interpolate(str(value), SENTINELS) for key, value in spec["environment"].items()}


def variables_of(spec: dict[str, Any]) -> set[str]:
    """The .env variables a container's environment names."""
    return {name for value in spec.get("environment", {}).values() for name in re.findall(r"\$\{([A-Za-z0-9_]+)", str(value))}


def setup_agents() -> tuple[str, ...]:
    command = SERVICES[SETUP]["command"]
    return tuple(command[i + 1] for i, word in enumerate(command) if word == "--agent")


def login_of(spec: dict[str, Any]) -> ProcessLogin:
    """The login the code gives the process a container runs (`cardflow service X`, the console, an agent)."""
    command = spec["command"]
    if command[1] == "agent":
        return ProcessLogin(agent_user(command[command.index("--id") + 1]))
    return service_login(command[2] if command[1] == "service" else command[1])


def subcommand(spec: dict[str, Any]) -> str:
    command = spec["command"]
    assert isinstance(command, list) and command[0] == "cardflow", command
    return command[1]


def test_backends_and_every_cardflow_process_are_present() -> None:
    commands = [spec["command"] for spec in APP_CONTAINERS.values()]

    assert BACKENDS <= SERVICES.keys()
    for name in CARDFLOW_SERVICES:
        assert ["cardflow", "service", name] in commands
    assert len([c for c in commands if c[1] == "agent" and "--sim" in c]) >= 2
    assert len({c[c.index("--id") + 1] for c in commands if c[1] == "agent"}) == len(
        [c for c in commands if c[1] == "agent"]
    )  # every agent has its own id
    assert ["console"] == [c[1] for c in commands if c[1] == "console"]


def test_every_cardflow_container_is_built_from_the_one_dockerfile() -> None:
    images = {spec["image"] for spec in APP_CONTAINERS.values()}
    builds = [spec["build"] for spec in APP_CONTAINERS.values()]

    assert len(images) == 1
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert images == {f"cardflow:{version}"}  # pinned to the project's version, like deploy/kubernetes
    assert all(build == {"context": ".", "dockerfile": "Dockerfile"} for build in builds)
    assert (REPO / "Dockerfile").is_file()
    assert all(spec.get("image") for spec in SERVICES.values())


@pytest.mark.parametrize("name", sorted(set(SERVICES) - {SETUP}))
def test_every_container_has_a_healthcheck(name: str) -> None:
    check = SERVICES[name]["healthcheck"]

    assert check["test"][0] in {"CMD", "CMD-SHELL"} and len(check["test"]) > 1
    assert check.get("interval") and check.get("retries")


@pytest.mark.parametrize("name", sorted(PROCESS_CONTAINERS))
def test_cardflow_containers_wait_for_healthy_backends_and_their_logins(name: str) -> None:
    depends = PROCESS_CONTAINERS[name]["depends_on"]

    assert set(depends) == BACKENDS | {SETUP}
    assert {backend: depends[backend]["condition"] for backend in BACKENDS} == dict.fromkeys(BACKENDS, "service_healthy")
    assert depends[SETUP]["condition"] == "service_completed_successfully"


def test_the_setup_container_runs_once_after_redis_and_postgres_answer() -> None:
    setup = SERVICES[SETUP]

    assert setup["command"][:2] == ["cardflow", "apply-logins"]
    assert setup["restart"] == "no" and setup["healthcheck"] == {"disable": True}
    assert setup["depends_on"] == {"redis": {"condition": "service_healthy"}, "postgres": {"condition": "service_healthy"}}
    assert setup["image"] == PROCESS_CONTAINERS["intake"]["image"]  # the same cardflow image


@pytest.mark.parametrize("name", sorted(PROCESS_CONTAINERS))
def test_every_cardflow_container_logs_in_as_its_own_redis_user_and_postgres_role(name: str) -> None:
    spec = PROCESS_CONTAINERS[name]
    login = login_of(spec)
    env = resolved_env(spec)
    redis = urlsplit(env["CARDFLOW_REDIS_URL"])

    assert (redis.username, redis.password) == (login.redis_user.name, SENTINELS[login.redis_password_variable])
    if login.pg_service is None:  # an agent: Redis only, as in deploy/kubernetes
        assert not {"CARDFLOW_DATABASE_URL", "CARDFLOW_S3_ACCESS_KEY", "CARDFLOW_S3_SECRET_KEY"} & env.keys()
        return
    database = urlsplit(env["CARDFLOW_DATABASE_URL"])
    assert (database.username, database.password) == (role_name(login.pg_service), SENTINELS[login.postgres_password_variable or ""])


@pytest.mark.parametrize("name", sorted(PROCESS_CONTAINERS))
def test_no_cardflow_container_but_setup_gets_an_admin_or_another_process_password(name: str) -> None:
    logins = process_logins(setup_agents())
    every_login_password = {variable for login in logins for variable in login.password_variables}
    named = variables_of(PROCESS_CONTAINERS[name])

    assert named & set(ADMIN_PASSWORDS) == set()
    assert named & every_login_password == set(login_of(PROCESS_CONTAINERS[name]).password_variables)


def test_only_the_backends_and_setup_get_the_admin_passwords() -> None:
    holders = {name for name, spec in SERVICES.items() if variables_of(spec) & set(ADMIN_PASSWORDS)}

    assert holders == {"redis", "postgres", SETUP}
    env = resolved_env(SERVICES[SETUP])
    redis, database = urlsplit(env["CARDFLOW_REDIS_URL"]), urlsplit(env["CARDFLOW_DATABASE_URL"])
    assert (redis.username or "default", redis.password) == ("default", SENTINELS["CARDFLOW_REDIS_ADMIN_PASSWORD"])
    superuser = SERVICES["postgres"]["environment"]["POSTGRES_USER"]
    assert (database.username, database.password) == (superuser, SENTINELS["CARDFLOW_POSTGRES_ADMIN_PASSWORD"])


def test_setup_makes_exactly_the_logins_the_code_defines_for_the_containers_it_starts() -> None:
    logins = process_logins(setup_agents())
    agent_ids = {spec["command"][spec["command"].index("--id") + 1] for spec in PROCESS_CONTAINERS.values() if subcommand(spec) == "agent"}

    assert set(setup_agents()) == agent_ids
    assert {login.redis_user.name for login in logins} == {user.name for user in system_users()} | {agent_user(a).name for a in agent_ids}
    assert {login.pg_service for login in logins if login.pg_service} == set(SERVICE_ROLES)
    assert sorted(login_of(spec).redis_user.name for spec in PROCESS_CONTAINERS.values()) == sorted(
        login.redis_user.name for login in logins
    )  # every login has its container and no two containers share one
    setup_env = variables_of(SERVICES[SETUP])
    assert setup_env - set(ADMIN_PASSWORDS) == {variable for login in logins for variable in login.password_variables}


def test_setup_prunes_the_agents_it_no_longer_lists_with_options_the_cli_accepts() -> None:
    """The --agent list is the fleet: a retired host's Redis user goes at the next `up`."""
    command = SERVICES[SETUP]["command"]
    assert "--prune-agents" in command[2:]
    cli = get_command(app)
    apply_logins = cli.commands[command[1]]  # type: ignore[attr-defined]
    params = apply_logins.make_context(command[1], list(command[2:])).params  # unknown options raise here
    assert params["prune_agents"] is True


def test_postgres_plans_as_the_embedded_server_does() -> None:
    from shared.embedded.postgres_server import RANDOM_PAGE_COST

    command = SERVICES["postgres"]["command"]
    assert command[0] == "postgres" and f"random_page_cost={RANDOM_PAGE_COST}" in command[1:]


def test_compose_env_example_lists_exactly_the_variables_the_file_needs() -> None:
    example = (REPO / "deploy" / "compose.env.example").read_text()
    listed = set(re.findall(r"^([A-Z0-9_]+)=", example, re.MULTILINE))
    used = set(re.findall(r"\$\{([A-Za-z0-9_]+)", COMPOSE_CODE))

    assert listed == used


def test_redis_keeps_its_users_in_an_acl_file_on_its_volume_with_the_admin_from_env(tmp_path: Path) -> None:
    """Runs the redis container's start script (with `true` for redis-server): the admin line is
    rewritten from .env at every start, the users `ACL SAVE` wrote are kept, the file is 0600."""
    redis = SERVICES["redis"]
    script, argv0, *server = redis["command"][2:]
    acl_file = redis["environment"]["REDIS_ACL_FILE"]
    assert redis["command"][:2] == ["sh", "-c"] and server[0] == "redis-server"
    assert acl_file.startswith("/data/") and "redis-data:/data" in redis["volumes"]
    saved_user = "user service.intake on #abc resetchannels +ping ~cf:ingest"
    path = tmp_path / "users.acl"
    path.write_text(f"user default on #{'0' * 64} ~* &* +@all\n{saved_user}\n")

    env = {"PATH": "/usr/bin:/bin", "REDIS_PASSWORD": "new-admin", "REDIS_ACL_FILE": str(path)}
    subprocess.run(["sh", "-c", script.replace("$$", "$"), argv0, "true"], env=env, check=True, timeout=10)

    assert sorted(path.read_text().splitlines()) == sorted([admin_file_line("new-admin"), saved_user])
    assert path.stat().st_mode & 0o777 == 0o600
    assert "--aclfile" in script and "requirepass" not in " ".join(redis["command"])


@pytest.mark.parametrize("name", sorted(SERVICE_CONTAINERS))
def test_service_containers_get_every_backend_setting(name: str) -> None:
    env = resolved_env(SERVICE_CONTAINERS[name])

    assert [key for key in REQUIRED_ENV if key not in env] == []
    urls = ("CARDFLOW_REDIS_URL", "CARDFLOW_DATABASE_URL", "CARDFLOW_S3_ENDPOINT")
    hosts = [urlsplit(env[key]).hostname for key in urls]
    assert hosts == ["redis", "postgres", "s3"]
    assert env["CARDFLOW_S3_ADDRESSING_STYLE"] == "path"


def test_secrets_come_from_the_environment_not_the_file() -> None:
    env = resolved_env(SERVICES["intake"])
    secrets = {
        "app redis password": urlsplit(env["CARDFLOW_REDIS_URL"]).password,
        "app postgres password": urlsplit(env["CARDFLOW_DATABASE_URL"]).password,
        "app s3 access key": env["CARDFLOW_S3_ACCESS_KEY"],
        "app s3 secret key": env["CARDFLOW_S3_SECRET_KEY"],
        "redis server password": resolved_env(SERVICES["redis"])["REDIS_PASSWORD"],
        "postgres server password": resolved_env(SERVICES["postgres"])["POSTGRES_PASSWORD"],
        "s3 server access key": resolved_env(SERVICES["s3"])["AWS_ACCESS_KEY_ID"],
        "s3 server secret key": resolved_env(SERVICES["s3"])["AWS_SECRET_ACCESS_KEY"],
        "agent redis password": urlsplit(resolved_env(SERVICES["agent-h100-1"])["CARDFLOW_REDIS_URL"]).password,
    } | {f"setup {key}": value for key, value in resolved_env(SERVICES[SETUP]).items() if key.endswith("_PASSWORD")}

    assert [what for what, value in secrets.items() if not str(value).startswith("from-env-")] == []
    for name in BACKENDS | {"intake", "agent-h100-1", SETUP}:
        with pytest.raises(KeyError, match="is required"):  # no silent default secret
            {key: interpolate(str(value), {}) for key, value in SERVICES[name]["environment"].items()}


def test_backend_data_lives_in_declared_volumes() -> None:
    declared = set(COMPOSE["volumes"])
    mounts = {name: spec.get("volumes", []) for name, spec in SERVICES.items()}

    assert "redis-data:/data" in mounts["redis"]
    assert "postgres-data:/var/lib/postgresql/data" in mounts["postgres"]
    assert "s3-data:/data" in mounts["s3"]
    used = {mount.split(":")[0] for volumes in mounts.values() for mount in volumes}
    assert used <= declared
    agents = [name for name, spec in APP_CONTAINERS.items() if subcommand(spec) == "agent"]
    assert all(mounts[name] for name in agents)  # checkpoints survive a container restart


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_backend_images_are_pinned_to_a_version(name: str) -> None:
    image = SERVICES[name]["image"]
    repository, _, tag = image.rpartition(":")

    assert repository and re.fullmatch(r"\d+(\.\d+)*(-[a-z0-9.]+)?", tag), f"{name}: {image} is not pinned to a version"


def test_redis_keeps_an_append_only_file() -> None:
    command = " ".join(SERVICES["redis"]["command"])

    assert "--appendonly yes" in command


def test_the_image_runs_the_cardflow_console_script_as_a_non_root_user() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]

    assert scripts["cardflow"] == "services.cli.main:app"
    assert re.search(r"^USER (?!root)\S+", dockerfile, re.MULTILINE)
    assert re.search(r"^RUN pip install", dockerfile, re.MULTILINE)


def test_compose_commands_exist_in_the_cli_or_are_listed_as_pending() -> None:
    from services.cli.service import SERVICES as RUNNABLE_SERVICES

    registered = set(get_command(app).commands)  # type: ignore[attr-defined]
    used = {subcommand(spec) for spec in APP_CONTAINERS.values()}
    services = {spec["command"][2] for spec in APP_CONTAINERS.values() if subcommand(spec) == "service"}

    assert used - registered <= PENDING_COMMANDS
    assert PENDING_COMMANDS & registered == set(), "a pending command now exists: remove it from PENDING_COMMANDS"
    assert services <= set(RUNNABLE_SERVICES)


def test_simulated_agents_name_card_types_of_the_catalog() -> None:
    from services.agent.hardware import parse_sim_spec
    from shared.cards import load_catalog

    catalog = load_catalog()
    agents = [spec["command"] for spec in APP_CONTAINERS.values() if subcommand(spec) == "agent"]
    assert agents, "the compose file runs no simulated agent"
    for command in agents:
        card_type, gpus = parse_sim_spec(command[command.index("--sim") + 1])
        assert card_type in catalog.cards, f"{command}: {card_type} is not in the card catalog"
        assert gpus >= 1
