"""Who is calling the HTTP API: FastAPI dependencies over the tokens of schema `identity`.

    @router.post("/things")
    async def make_thing(principal: Authenticated, ...):            # 401 without a valid token
        require(principal, Role.SUBMITTER, project=body.project)     # 403 naming the missing role
        ... emit with actor=principal.actor ...

    @router.post("/tokens", dependencies=[requires(Role.ADMIN)])  # or: principal: Annotated[Principal, requires(Role.ADMIN)]

- A token comes from `Authorization: Bearer <token>` (CLI, scripts) or, for the web console, from
  the HttpOnly session cookie the login page sets (`SESSION_COOKIE`).
- Every request looks the token up (one indexed query), so a revoked token is refused at once.
- `PermissionDenied` raised anywhere in a route becomes `403 {"detail": "<one line>"}`
  (`install_permission_handler`); 401 answers carry `WWW-Authenticate: Bearer`.
- Nothing a caller sends names the actor: events record `principal.actor` (`user:<token name>`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.identity.tokens import find_principal
from shared.identity import PermissionDenied, Principal, Role, require

SESSION_COOKIE = "cardflow_session"
NO_TOKEN = (
    "not authenticated: no token; send 'Authorization: Bearer <token>' (the CLI reads CARDFLOW_TOKEN or"
    " CARDFLOW_TOKEN_FILE; an admin creates tokens with `cardflow token create`)"
)
BAD_TOKEN = "not authenticated: the token is not valid (unknown, mistyped or revoked)"

_bearer = HTTPBearer(auto_error=False, description="an API token (`cardflow token create`)")


def presented_token(request: Request, credentials: HTTPAuthorizationCredentials | None) -> str | None:
    """The token a request carries: the bearer header first, else the console's session cookie."""
    if credentials is not None and credentials.credentials:
        return credentials.credentials.strip()
    return request.cookies.get(SESSION_COOKIE) or None


async def authenticate(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    """The principal of a request's token; 401 when it carries none or one that is not active."""
    token = presented_token(request, credentials)
    if token is None:
        raise _unauthorized(NO_TOKEN)
    principal = await find_principal(request.app.state.pool, token)
    if principal is None:
        raise _unauthorized(BAD_TOKEN)
    request.state.principal = principal
    return principal


Authenticated = Annotated[Principal, Depends(authenticate)]
"""A route parameter of this type is the caller (401 before the route runs if there is none)."""


def requires(role: Role, project: str | None = None) -> Any:
    """A dependency: the caller, if it may act as `role` (on `project`), else 403 naming the missing role.

    For a project known only from the request (a task's project), call `require(principal, role,
    project)` in the route instead; its `PermissionDenied` becomes the same 403.
    """

    async def check(principal: Authenticated) -> Principal:
        return require(principal, role, project)

    return Depends(check)


def install_permission_handler(app: FastAPI) -> None:
    """Answer `PermissionDenied` with 403 and its one-line message."""

    async def forbidden(_request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=403)

    app.add_exception_handler(PermissionDenied, forbidden)


async def optional_principal(request: Request) -> Principal | None:
    """The caller if its bearer header or session cookie holds an active token, else None (no 401)."""
    authorization = request.headers.get("authorization", "")
    scheme, _, value = authorization.partition(" ")
    token = value.strip() if scheme.lower() == "bearer" and value.strip() else request.cookies.get(SESSION_COOKIE)
    return await find_principal(request.app.state.pool, token) if token else None


async def principal_from_token(pool: Any, token: str | None) -> Principal | None:
    """The holder of an active token, else None (for pages that redirect to /login instead of answering 401)."""
    return await find_principal(pool, token) if token else None


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(401, detail, headers={"WWW-Authenticate": "Bearer"})
