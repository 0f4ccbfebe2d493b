"""The plain HTTP side of the one port, inside the ``websockets`` server.

``websockets`` answers plain HTTP requests through ``process_request`` (a request that
returns a response instead of upgrading), but its request parser (``Request.parse``)
refuses a request with a body (``Content-Length`` other than 0, or any
``Transfer-Encoding``: it closes the connection without a reply), so a POST upload cannot
reach ``process_request`` as it is.  :class:`Connection` (the server's
``create_connection``) therefore runs the library's own request parser with one change: the
``Content-Length`` and ``Transfer-Encoding`` header lines are handed to it under other names,
and after the head the body (at most ``max_upload_bytes``) is read with the library's stream
reader and kept on the connection for ``process_request``: ``Content-Length`` bytes, or a
body in ``Transfer-Encoding: chunked`` (RFC 9112 section 7.1: chunk-size lines, the chunks,
the trailer fields, read with the library's line and header readers; only the chunk framing
is decoded here -- the library decodes chunked bodies only in responses, by default up to
1 MiB).
A POST whose body cannot be read -- another transfer coding, both headers, a malformed
chunked body -- still reaches ``process_request``, with :attr:`Connection.body_error`
saying why, so it gets a one-line error reply.  Requests, headers, frames and responses are
all still parsed and written by ``websockets``.

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
import re
from typing import Callable, Optional

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.exceptions import InvalidMessage, SecurityError
from websockets.http11 import Request, Response, parse_headers, parse_line
from websockets.protocol import Protocol

HIDDEN_LENGTH = b"X-Asrkit-Body-Length"
HIDDEN_CODING = b"X-Asrkit-Body-Coding"
_HIDDEN = {b"content-length": HIDDEN_LENGTH, b"transfer-encoding": HIDDEN_CODING}
_CHUNK_SIZE = re.compile(rb"[0-9a-fA-F]{1,15}")  # (chunk-size = 1*HEXDIG; 15 digits: below 2**60 bytes)


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
    ``gate`` (module docstring).  After the request: ``body`` (bytes; ``None`` without one),
    ``body_too_large`` (the body is larger than ``max_upload_bytes``: not read) and
    ``body_error`` (``None``, or ``(HTTP status, one-line message)`` for a body that could not
    be read: 501 for a transfer coding other than ``chunked``, 400 for both
    ``Content-Length`` and ``Transfer-Encoding`` or a malformed chunked body)."""

    def __init__(self, protocol, server, *, gate: Gate, **kwargs):
        super().__init__(protocol, server, **kwargs)
        self.gate = gate
        self.body: Optional[bytes] = None
        self.body_too_large = False
        self.body_error: Optional[tuple[int, str]] = None
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
        hidden: dict[bytes, list[bytes]] = {name: [] for name in _HIDDEN}
        lengths, codings = hidden[b"content-length"], hidden[b"transfer-encoding"]

        def read_line(limit, too_long):
            line = yield from protocol.reader.read_line(limit, too_long)
            name, sep, value = bytes(line).partition(b":")
            if sep and name.strip().lower() in _HIDDEN:
                hidden[name.strip().lower()].append(value.strip())
                return _HIDDEN[name.strip().lower()] + b":" + value
            return line

        try:
            request = yield from Request.parse(read_line)
            if codings:
                if request.method != "POST":
                    raise ValueError("a body is accepted only on a POST")
                yield from self._read_coded_body(codings, lengths)
            elif lengths and set(lengths) != {b"0"}:
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

    def _read_coded_body(self, codings: list[bytes], lengths: list[bytes]):
        """The body of a POST with ``Transfer-Encoding`` ``codings`` (its header values):
        decoded into :attr:`body` when the coding is ``chunked`` alone and no
        ``Content-Length`` came with it (``lengths``), else :attr:`body_error` (module
        docstring); a body above ``max_upload_bytes`` is read no further (:attr:`body_too_large`)."""
        coding = b", ".join(codings).decode("latin-1")
        if [c.strip().lower() for c in coding.split(",")] != ["chunked"]:
            self.body_error = (501, f"transfer coding {coding!r} is not supported: send the file with "
                                    f"Content-Length or Transfer-Encoding: chunked")
            return
        if lengths:  # (RFC 9112 6.3: a request with both may be smuggling one; refused)
            self.body_error = (400, "both Content-Length and Transfer-Encoding: send one of them")
            return
        reader, parts, size = self.protocol.reader, [], 0
        try:
            while True:
                line = yield from parse_line(reader.read_line, SecurityError)
                digits = bytes(line).split(b";", 1)[0].strip(b" \t")  # (chunk extensions dropped)
                if not _CHUNK_SIZE.fullmatch(digits):
                    raise ValueError(f"chunk size {digits[:20].decode('latin-1')!r} is not hexadecimal")
                n = int(digits, 16)
                if n == 0:
                    break
                size += n
                if size > self.gate.max_upload_bytes:
                    self.body_too_large = True
                    return
                parts.append((yield from reader.read_exact(n)))
                if (yield from reader.read_exact(2)) != b"\r\n":
                    raise ValueError("a chunk's data is not followed by CRLF")
            yield from parse_headers(reader.read_line)  # (the trailer fields: read, not used)
        except (EOFError, SecurityError, ValueError) as e:  # (the request's head was valid: it gets a reply)
            self.body_error = (400, f"malformed chunked body: {(str(e) or type(e).__name__).splitlines()[0]}")
            return
        self.body = b"".join(parts)


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
