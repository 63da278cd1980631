"""The HTTP API of a member (the gossip design's REST endpoints) and its status page.

aiohttp, served from the member actor's own event loop, on 127.0.0.1 unless the member's
``http_host`` asks for its node's address or another (see below). JSON everywhere but ``/``
(the status page, ``status_page.py``).

``GET /``: the status page (HTML): members, states, view history, suspicions, traffic;
it refreshes every second from ``/membership/status``.

Open (GET):
* ``/membership/size``: ``{"size", "view_id", "member", "state"}``
* ``/membership/nodes``: ``{"view_id", "nodes": [{name, uuid, address, coordinator, state,
  self, recovery, role}]}`` (``recovery``: the member's recovery status from the last state
  exchange, the same at every member; ``role``: "arbitrator" for the work queue's
  arbitrator, which votes and holds no queue, else "data")
* ``/membership/views``: ``{"member", "views": [{view_id, coord_uuid, members, uuids,
  coordinator, installed_at, joined, left}]}`` (the JSON view history)
* ``/membership/status``: everything the status page shows

With the token:
* ``POST /membership/subscribe``: join (again) if not a member, with a fresh UUID; answers the
  cluster state ``{"state", "uuid", "view", "nodes"}``
* ``POST /membership/unsubscribe``: leave gracefully, then shut the member's stack down (its
  sockets close): ``{"state": "left", "confirmed": true}`` once the group confirmed the
  leave (the coordinator sent the view without it), ``false`` when nobody did within 10 s
  (the others then exclude it as a crash). The gossip design shuts the whole node down
  after the confirmation; here the node is a member actor, whose process Ray (and the
  node-following supervisor) would start again, so the actor stays and serves this API:
  ``/membership/subscribe`` brings the member back with a fresh UUID, and
  ``Group.shutdown()`` / ``raygroups down`` end the actors.
* ``GET /membership/debug/state-info``: ``MemberActor.state_info()``
* ``POST /membership/debug/shutdown``: failure simulation: the stack stops without leaving
  (``?process=1``: the actor's process exits, like kill -9)
* ``POST /membership/debug/pause?seconds=N``: delay simulation: the member stops answering
  for N s (at most 600)

The token (``Authorization: Bearer <token>``) guards every endpoint that changes the member
or reveals its internals; without it, or with a wrong one: 401. Reads are open unless
``auth="all"`` (``Group.launch(http_auth="all")``): then every endpoint needs the token,
the status page too; a browser opens ``/?token=<token>`` once, which sets the token as an
HttpOnly, SameSite=Strict cookie and redirects to ``/`` (the token leaves the address bar).

Where it listens: ``host`` (the member actor passes 127.0.0.1 unless ``http_host`` asks for
the node's address or another one). ``tls=(certfile, keyfile)``: HTTPS with that
certificate (PEM files readable on the member's node); the URLs are then ``https://``.
"""
from __future__ import annotations

import hmac
import json
import logging
import ssl
from typing import Any, Optional

from aiohttp import web

from .status_page import STATUS_PAGE

log = logging.getLogger("raygroups.http")
MAX_PAUSE_S = 600.0


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data, default=str), status=status,
                        content_type="application/json",
                        headers={"Cache-Control": "no-store"})


AUTH_MODES = ("debug", "all")
COOKIE = "raygroups_token"


def tls_context(tls: Optional[tuple]) -> Optional[ssl.SSLContext]:
    """A server context from ``(certfile, keyfile)``; None for plain HTTP. Raises ValueError
    naming the file when the certificate or key cannot be loaded."""
    if tls is None:
        return None
    cert, key = tls
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"TLS certificate {cert!r} / key {key!r} not loaded: "
                         f"{type(e).__name__}") from None
    return ctx


class HttpApi:
    def __init__(self, member: Any, host: str, port: int = 0, token: str = "",
                 auth: str = "debug", tls: Optional[tuple] = None):
        if auth not in AUTH_MODES:
            raise ValueError(f"http_auth must be one of {AUTH_MODES}, not {auth!r}")
        if auth == "all" and not token:
            raise ValueError('http_auth="all" needs a token')
        self.member, self.host, self.port, self.token = member, host, port, token
        self.auth = auth
        self.ssl = tls_context(tls)
        self.runner: Optional[web.AppRunner] = None

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl is not None else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}/"

    async def start(self) -> None:
        middlewares = [self._errors] + ([self._all_need_token] if self.auth == "all" else [])
        app = web.Application(middlewares=middlewares)
        r = app.router
        r.add_get("/", self.page)
        r.add_get("/membership/size", self.size)
        r.add_get("/membership/nodes", self.nodes)
        r.add_get("/membership/views", self.views)
        r.add_get("/membership/status", self.status)
        r.add_post("/membership/subscribe", self.subscribe)
        r.add_post("/membership/unsubscribe", self.unsubscribe)
        r.add_get("/membership/debug/state-info", self.state_info)
        r.add_post("/membership/debug/shutdown", self.shutdown)
        r.add_post("/membership/debug/pause", self.pause)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host, self.port, ssl_context=self.ssl)
        await site.start()
        self.port = self.runner.addresses[0][1]
        log.info("HTTP API at %s", self.url)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    # -- plumbing -------------------------------------------------------------------------
    @web.middleware
    async def _errors(self, request: web.Request, handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except Exception as e:  # NotMember, JoinTimeout, ...: a JSON error, not a 500 page
            log.warning("%s %s: %s", request.method, request.path, e)
            return _json({"error": type(e).__name__, "detail": str(e)}, status=409)

    @web.middleware
    async def _all_need_token(self, request: web.Request, handler) -> web.StreamResponse:
        """``auth="all"``: the token on every request (header or cookie); ``/?token=`` sets
        the cookie for a browser."""
        given = request.query.get("token")
        if request.path == "/" and given is not None and self._matches(given):
            resp = web.HTTPSeeOther("/")
            resp.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict",
                            secure=self.ssl is not None, path="/")
            raise resp
        self._require_token(request)
        return await handler(request)

    def _matches(self, value: str) -> bool:
        return bool(self.token) and hmac.compare_digest(value.strip().encode(),
                                                        self.token.encode())

    def _authorized(self, request: web.Request) -> bool:
        got = request.headers.get("Authorization", "")
        scheme, _, value = got.partition(" ")
        if scheme.lower() == "bearer" and self._matches(value):
            return True
        return self.auth == "all" and self._matches(request.cookies.get(COOKIE, ""))

    def _require_token(self, request: web.Request) -> None:
        if not self._authorized(request):
            raise web.HTTPUnauthorized(
                text=json.dumps({"error": "unauthorized",
                                 "detail": "this endpoint needs Authorization: Bearer <token> "
                                           "(a browser: /?token=<token>)"}),
                content_type="application/json",
                headers={"WWW-Authenticate": 'Bearer realm="raygroups"'})

    def _in_view(self) -> bool:
        m = self.member
        return m.state in ("member", "paused") and m.channel is not None and \
            m.channel.view is not None

    # -- open endpoints ---------------------------------------------------------------------
    async def page(self, request: web.Request) -> web.Response:
        return web.Response(text=STATUS_PAGE, content_type="text/html",
                            headers={"Cache-Control": "no-store"})

    async def size(self, request: web.Request) -> web.Response:
        m = self.member
        view = m.channel.view if self._in_view() else None
        return _json({"size": len(view) if view is not None else 0,
                      "view_id": [view.view_id.coord.name, view.view_id.id] if view else None,
                      "member": m.spec.name, "state": m.state})

    async def nodes(self, request: web.Request) -> web.Response:
        m = self.member
        if not self._in_view():
            return _json({"view_id": None, "nodes": [], "state": m.state})
        v = m.channel.view
        return _json({"view_id": [v.view_id.coord.name, v.view_id.id], "nodes": m.members()})

    async def views(self, request: web.Request) -> web.Response:
        return _json({"member": self.member.spec.name, "views": self.member.view_history()})

    async def status(self, request: web.Request) -> web.Response:
        m = self.member
        info = m.state_info()
        return _json({"member": {k: info[k] for k in (
                          "name", "cluster", "uuid", "address", "node_id", "state", "view_id",
                          "view_size", "coordinator", "pid", "restarts", "paused_until",
                          "role", "durable")},
                      "members": info["members"],
                      "views": m.view_history()[-50:][::-1],
                      "suspected": info["suspected"],
                      "suspicions": info["suspicions"][-50:][::-1],
                      "figures": info["figures"], "dropped": info["dropped"],
                      "stats": info["stats"], "ray_signal": info["ray_signal"]})

    # -- token endpoints --------------------------------------------------------------------
    async def subscribe(self, request: web.Request) -> web.Response:
        self._require_token(request)
        m = self.member
        await m.rejoin()
        v = m.channel.view
        from .member import view_json
        return _json({"state": m.state, "uuid": m.uid(), "view": view_json(v),
                      "nodes": m.members()})

    async def unsubscribe(self, request: web.Request) -> web.Response:
        self._require_token(request)
        confirmed = await self.member.leave()
        return _json({"state": self.member.state, "confirmed": confirmed})

    async def state_info(self, request: web.Request) -> web.Response:
        self._require_token(request)
        return _json(self.member.state_info())

    async def shutdown(self, request: web.Request) -> web.Response:
        self._require_token(request)
        if request.query.get("process") in ("1", "true", "yes"):
            await self.member.crash(delay=0.2)
            return _json({"state": "exiting"}, status=202)
        await self.member.shutdown_stack()
        return _json({"state": self.member.state})

    async def pause(self, request: web.Request) -> web.Response:
        self._require_token(request)
        try:
            seconds = float(request.query.get("seconds", "1"))
        except ValueError:
            raise web.HTTPBadRequest(text="seconds must be a number")
        if not 0 < seconds <= MAX_PAUSE_S:
            raise web.HTTPBadRequest(text=f"seconds must be in (0, {MAX_PAUSE_S}]")
        out = await self.member.pause(seconds)
        return _json({"state": self.member.state, **out})
