"""The plain HTTP side of the one port, inside the ``websockets`` server.

``websockets`` answers plain HTTP requests through ``process_request`` (a request that
returns a response instead of upgrading), but its request parser (``Request.parse``)
refuses a request with a body (``Content-Length`` other than 0: it closes the connection
without a reply), so a POST upload cannot reach ``process_request`` as it is.
:class:`Connection` (the server's ``create_connection``) therefore runs the library's own
request parser with one change: the ``Content-Length`` header line is handed to it under
another name, and after the head the body's bytes (at most ``max_upload_bytes``) are read
with the library's stream reader and kept on the connection for ``process_request``;
requests, headers, frames and responses are all still parsed and written by ``websockets``.

:class:`Connection` also enforces the connection limit (a connection beyond
``max_connections`` is closed at once) and drops a connection whose request has not
arrived within ``idle_timeout_s``.

Routes (``process_request`` in :mod:`asrkit.serve.server`): ``GET /`` the page (a websocket
upgrade on ``/`` is the stream), ``GET /info`` the model as JSON, ``POST /transcribe`` (or
``POST /``) a whole file, answered with ``transcribe``'s JSON.
"""
from __future__ import annotations

import http
import json
from typing import Callable, Optional

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.exceptions import InvalidMessage
from websockets.http11 import Request, Response
from websockets.protocol import Protocol

HIDDEN_LENGTH = b"X-Asrkit-Body-Length"


class Gate:
    """Counts open connections; ``max_connections``, ``idle_timeout_s`` and
    ``max_upload_bytes`` are the limits :class:`Connection` applies."""

    def __init__(self, max_connections: int, idle_timeout_s: float, max_upload_bytes: int):
        self.max_connections, self.idle_timeout_s = max_connections, idle_timeout_s
        self.max_upload_bytes = max_upload_bytes
        self.open = 0
        self.refused = 0


class Connection(ServerConnection):
    """A ``websockets`` server connection that reads a POST's body and keeps the limits of
    ``gate`` (module docstring).  After the request: ``body`` (bytes; ``None`` without one)
    and ``body_too_large``."""

    def __init__(self, protocol, server, *, gate: Gate, **kwargs):
        super().__init__(protocol, server, **kwargs)
        self.gate = gate
        self.body: Optional[bytes] = None
        self.body_too_large = False
        self.counted = False
        protocol.parser = self._parse()  # (no byte has arrived yet: the library's own parser is replaced unused)
        next(protocol.parser)

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if self.gate.open >= self.gate.max_connections:
            self.gate.refused += 1
            transport.abort()
            return
        self.gate.open += 1
        self.counted = True
        self.loop.call_later(self.gate.idle_timeout_s, self._drop_without_request)

    def connection_lost(self, exc) -> None:
        if self.counted:
            self.gate.open -= 1
            self.counted = False
        super().connection_lost(exc)

    def _drop_without_request(self) -> None:
        if self.request is None and self.transport is not None and not self.transport.is_closing():
            self.transport.abort()

    def _parse(self):
        """``ServerProtocol.parse`` with a body read after the head (module docstring)."""
        protocol = self.protocol
        lengths: list[bytes] = []

        def read_line(limit, too_long):
            line = yield from protocol.reader.read_line(limit, too_long)
            name, sep, value = bytes(line).partition(b":")
            if sep and name.strip().lower() == b"content-length":
                lengths.append(value.strip())
                return HIDDEN_LENGTH + b":" + value
            return line

        try:
            request = yield from Request.parse(read_line)
            if lengths and set(lengths) != {b"0"}:
                if len(set(lengths)) != 1 or not lengths[0].isdigit() or request.method != "POST":
                    raise ValueError("a body is accepted only with one Content-Length on a POST")
                size = int(lengths[0])
                if size > self.gate.max_upload_bytes:
                    self.body_too_large = True
                else:
                    self.body = bytes((yield from protocol.reader.read_exact(size)))
        except Exception as exc:  # (as the library does: no valid request, no reply)
            protocol.handshake_exc = InvalidMessage("did not receive a valid HTTP request")
            protocol.handshake_exc.__cause__ = exc
            protocol.send_eof()
            protocol.parser = protocol.discard()
            next(protocol.parser)
            yield
        protocol.events.append(request)
        if request.method == "POST":  # (an upload's answer ends the connection: what follows is dropped)
            while not (yield from protocol.reader.at_eof()):
                protocol.reader.discard()
            yield
        else:
            yield from Protocol.parse(protocol)


def response(status: int, body: bytes, content_type: str) -> Response:
    status = http.HTTPStatus(status)
    headers = Headers([("Content-Type", content_type), ("Content-Length", str(len(body))),
                       ("Cache-Control", "no-store"), ("Connection", "close")])
    return Response(status.value, status.phrase, headers, body)


def json_response(status: int, obj) -> Response:
    return response(status, json.dumps(obj, ensure_ascii=False).encode("utf-8"), "application/json; charset=utf-8")


def html_response(text: str) -> Response:
    return response(200, text.encode("utf-8"), "text/html; charset=utf-8")


def is_upgrade(request: Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


def route(request: Request) -> tuple[str, str]:
    """``(method, path without the query)``."""
    return request.method, request.path.split("?", 1)[0]


def upload_name(request: Request) -> str:
    """The file name a client gives (``?name=`` or the ``X-Filename`` header), for the
    file's format and the JSON's ``path``."""
    from urllib.parse import parse_qs, urlsplit
    query = parse_qs(urlsplit(request.path).query)
    name = (query.get("name") or [request.headers.get("X-Filename", "")])[0]
    return name.replace("/", "_").replace("\\", "_")[:200]


ConnectionFactory = Callable[..., Connection]


def connection_factory(gate: Gate) -> ConnectionFactory:
    """``create_connection`` for ``websockets.asyncio.server.serve``."""
    def create(protocol, server, **kwargs) -> Connection:
        return Connection(protocol, server, gate=gate, **kwargs)
    return create
