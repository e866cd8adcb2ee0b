"""`grpo doctor` against a server that is not quite a Kubernetes API server (a tiny local HTTP server on 127.0.0.1,
the kubeconfig pointing at it): an HTML login page, an empty body, JSON of the wrong shape, a server that drips
bytes or never answers, a credential plugin that hangs, a bad `--as`, an address without a scheme. Each is one
line naming what answered and how, exit status 1, never a traceback, and the command ends at its `--timeout`."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.cli import GRPO

Answer = Callable[[http.server.BaseHTTPRequestHandler], None]


def _reply(status: int, body: bytes, content_type: str) -> Answer:
    def answer(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return answer


def _drip(handler: http.server.BaseHTTPRequestHandler) -> None:
    """Headers, then one byte of a JSON body every 0.2 s, for longer than any deadline here: every read of the
    socket gets a byte, so a per-read timeout never fires."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    handler.wfile.write(b'{"items": [')
    for _ in range(300):
        handler.wfile.write(b" ")
        handler.wfile.flush()
        time.sleep(0.2)


def _hang(handler: http.server.BaseHTTPRequestHandler) -> None:
    time.sleep(60)  # takes the request, never answers


LOGIN_PAGE = b"<!DOCTYPE html><html><head><title>Sign in</title></head><body>Sign in to continue</body></html>"


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    answer: Answer


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self.server.answer(self)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.answer(self)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _kubeconfig(tmp_path: Path, server: str, user: str = "{token: t}") -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n"
        f"users: [{{name: u, user: {user}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return path


def _doctor(kubeconfig: Path, *args: str) -> str:
    """`grpo doctor` as the user runs it; its one line on stderr, after checking it ended so."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"PYTHONWARNINGS": "default"}
    result = subprocess.run(
        [*GRPO, "doctor", "--kubeconfig", str(kubeconfig), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=90,  # a safety net for a loaded machine: the command's own --timeout is what ends it
        env=env,
    )
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and result.stdout == "", result
    assert lines[0].startswith("grpo doctor: ")
    return lines[0]


def _url(server: _Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        pytest.param(
            _reply(200, LOGIN_PAGE, "text/html"),
            '200 text/html, not JSON, starting "<!DOCTYPE html>',
            id="html-login-page",
        ),
        pytest.param(_reply(200, b"", "application/json"), "200 application/json, an empty body", id="empty-body"),
        pytest.param(
            _reply(200, b"[1, 2, 3]", "application/json"),
            "JSON that is not a Kubernetes object (a list)",
            id="json-list",
        ),
        pytest.param(
            _reply(200, b"42", "application/json"), "JSON that is not a Kubernetes object (a number)", id="json-number"
        ),
        pytest.param(
            _reply(200, b'{"items": "none"}', "application/json"), "not a Kubernetes list", id="items-not-a-list"
        ),
        pytest.param(
            _reply(200, b'{"items": [1, "x"]}', "application/json"), "not a Kubernetes list", id="items-not-objects"
        ),
        pytest.param(
            _reply(
                200,
                b'{"spec": [], "status": "up", "items": [{"metadata": "m", "status": 7, "spec": []}]}',
                "application/json",
            ),
            "do not have the shape Kubernetes gives them",
            id="objects-of-the-wrong-shape",
        ),
    ],
)
def test_an_answer_that_is_not_an_api_servers_is_one_line_naming_what_answered_and_how(
    tmp_path: Path, server: _Server, answer: Answer, said: str
) -> None:
    server.answer = answer
    line = _doctor(_kubeconfig(tmp_path, _url(server)))
    assert f"the server at {_url(server)} answered" in line and said in line
    assert line.endswith("a Kubernetes API server (not a login page, proxy or other service)?") or line.endswith(
        "a Kubernetes API server?"
    )


@pytest.mark.parametrize(
    ("answer", "step"),
    [pytest.param(_drip, "GET ", id="drips-bytes"), pytest.param(_hang, "GET ", id="never-answers")],
)
def test_a_server_that_drips_or_never_answers_ends_at_the_timeout_with_one_line(
    tmp_path: Path, server: _Server, answer: Answer, step: str
) -> None:
    server.answer = answer
    line = _doctor(_kubeconfig(tmp_path, _url(server)), "--timeout", "3")
    assert line.startswith("grpo doctor: no answer within --timeout 3 s while GET " + _url(server))
    assert line.endswith("or raise --timeout")


def test_a_credential_plugin_that_hangs_ends_at_the_timeout_with_one_line(tmp_path: Path, server: _Server) -> None:
    server.answer = _reply(200, b"{}", "application/json")
    plugin = "{exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: sleep, args: ['20'], interactiveMode: Never}}"
    line = _doctor(_kubeconfig(tmp_path, _url(server), user=plugin), "--timeout", "3")
    assert "no answer within --timeout 3 s while loading the kubeconfig (a credential plugin it runs" in line


@pytest.mark.parametrize("as_user", ["alice\r\nX-Evil: 1", "alice\n", "bob\t"], ids=["crlf", "lf", "tab"])
def test_an_as_user_with_a_line_break_or_control_character_is_refused_as_bad_input(
    tmp_path: Path, server: _Server, as_user: str
) -> None:
    server.answer = _reply(200, b"{}", "application/json")
    line = _doctor(_kubeconfig(tmp_path, _url(server)), "--as", as_user)
    assert line.startswith("grpo doctor: --as ") and "may not hold a control character" in line


def test_a_server_address_without_a_scheme_is_one_line_with_no_warning_first(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
        line = _doctor(_kubeconfig(tmp_path, address))
    assert f"server address '{address}' has no http:// or https:// scheme; write it as https://{address}" in line
