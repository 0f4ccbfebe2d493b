"""``asrkit serve``'s bad input: one ``error:`` line and exit status 2, never a traceback --
no model, a missing model directory, a port out of range or in use, TLS files missing or
given alone, limits out of range; and TLS itself: with a certificate the page and the stream
are served over https/wss."""
from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
import urllib.request

import pytest

from asrkit.bin import cli
from tests.serve.serve_helpers import CHUNK_MODEL, ServerThread, with_silence

pytestmark = pytest.mark.usefixtures("threads_back")


@pytest.mark.parametrize("args, message", [
    ([], "no model"),
    (["--model", "/no/such/exp"], "/no/such/exp"),
    (["--model", str(CHUNK_MODEL), "--port", "70000"], "--port must be in [0, 65535]"),
    (["--model", str(CHUNK_MODEL), "--certfile", "/no/cert.pem", "--keyfile", "/no/key.pem"], "--certfile /no/cert.pem"),
    (["--model", str(CHUNK_MODEL), "--certfile", "/no/cert.pem"], "--certfile and --keyfile go together"),
    (["--model", str(CHUNK_MODEL), "--workers", "0"], "--workers must be >= 1"),
    (["--model", str(CHUNK_MODEL), "--max_batch", "0"], "--max_batch must be >= 1"),
    (["--model", str(CHUNK_MODEL), "--batch_window_ms", "-1"], "--batch_window_ms must be in [0, 1000]"),
    (["--model", str(CHUNK_MODEL), "--chunk", "0"], "chunk must be >= 1"),
    (["--model", str(CHUNK_MODEL), "--mode", "no_such_mode"], "no_such_mode"),
])
def test_bad_input_is_one_error_line_and_status_2(args, message, capsys, monkeypatch):
    monkeypatch.delenv("ASRKIT_MODEL", raising=False)
    assert cli.main(["serve", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_a_port_in_use(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli.main(["serve", "--model", str(CHUNK_MODEL), "--port", str(port)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line.lower()]
    assert len(err) == 1 and err[0].startswith(f"error: cannot listen on 127.0.0.1:{port}"), err


def test_tls_serves_the_page_and_the_stream(chunk_model, utterances, tmp_path):
    from asrkit.serve import ServedModel
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(cert))
    server = ServerThread(ServedModel(chunk_model), ssl_context=server_ctx)
    try:
        port = server.server.port
        page = urllib.request.urlopen(f"https://127.0.0.1:{port}/info", context=client_ctx, timeout=30).read()
        assert json.loads(page)["kind"] == "chunks"
        from websockets.asyncio.client import connect

        async def run():
            async with connect(f"wss://127.0.0.1:{port}/", ssl=client_ctx) as ws:
                await ws.send(json.dumps({"signal": "start"}))
                ready = json.loads(await ws.recv())
                await ws.send(with_silence(utterances[8][1]).tobytes())
                await ws.send(json.dumps({"signal": "end"}))
                return [ready] + [json.loads(m) async for m in ws]
        replies = asyncio.run(run())
        assert replies[0]["type"] == "server_ready" and replies[-1]["type"] == "speech_end"
        assert json.loads(replies[-2]["nbest"])[0]["sentence"]
    finally:
        server.close()
