"""The env server's answers to bad HTTP requests (agentfly_envs/remote/server.py): a 4xx status and a one-line
``{"error": ...}``, with no traceback in the server's log; the same messages as over ``/ws``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

import agentfly_envs  # noqa: F401  (registers the env ids)

pytest.importorskip("openenv", reason='needs openenv-core (the "openenv" extra)')
from agentfly_envs.remote import ServerThread, create_app

KWARGS = {"level": "easy"}
CASES = {
    "/reset": [
        ("POST", "/reset", b"not json", 400, "Invalid JSON: Expecting value"),
        ("POST", "/reset", b'{"foo": 1}', 422, "unknown reset data ['foo']; a served agentfly env takes"),
        ("POST", "/reset", b"[1, 2]", 422, "Invalid request: Input should be a valid dictionary"),
        ("POST", "/reset", b'{"seed": "x"}', 422, "Invalid request: seed: Input should be a valid integer"),
        ("POST", "/reset", b'{"index": "x"}', 422, "options['index'] must be an int in [0, "),
        ("POST", "/reset", b'{"task": {"level": 3}}', 422, "task row is missing field(s) ['question', 'answer']"),
        ("GET", "/reset", None, 405, "Method Not Allowed"),
    ],
    "/step": [
        ("POST", "/step", b"{", 400, "Invalid JSON: "),
        ("POST", "/step", b'{"action": {"text": "hi"}}', 409, "no episode to step: reset first in the same session"),
        ("POST", "/step", b'{"action": {"text": "hi"}, "foo": 1}', 422, "unknown step data ['foo']; a step takes"),
        ("POST", "/step", b'{"action": {"txt": "hi"}}', 422, "Invalid request: txt: Extra inputs are not permitted"),
        ("POST", "/step", b'{"action": {}}', 422, 'Invalid request: an action is {"text": "..."}'),
        ("POST", "/step", b'{"action": 3}', 422, "Invalid request: action: Input should be a valid dictionary"),
        ("POST", "/step", b'{"action": {"text": 3}}', 422, "Invalid request: text: Input should be a valid string"),
        ("POST", "/step", b"{}", 422, "Invalid request: action: Field required"),
        ("GET", "/step", None, 405, "Method Not Allowed"),
    ],
    "GET routes": [
        ("POST", route, b"{}", 405, "Method Not Allowed")
        for route in ("/state", "/health", "/schema", "/metadata", "/info")
    ],
    "unknown routes": [("GET", "/nope", None, 404, "Not Found"), ("POST", "/ws", b"{}", 404, "Not Found")],
}
"""Per group of routes: ``(method, route, body, status, the start of the error message)``."""
SAME_REFUSALS = [
    ("/reset", {"foo": 1}, {"type": "reset", "data": {"foo": 1}}),
    ("/reset", {"index": "x"}, {"type": "reset", "data": {"index": "x"}}),
    ("/step", {"action": {"text": "hi"}}, {"type": "step", "data": {"text": "hi"}}),
]
"""``(HTTP route, its body, the /ws message)`` making the same mistake."""


def request(url: str, method: str, body: bytes | None) -> tuple[int, dict]:
    """``method url`` with a JSON ``body``; returns the status and the answer's JSON."""
    sent = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(sent, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def fail() -> None:
    """A route failing as a buggy env would."""
    raise RuntimeError("the env\nbroke")


def answers_and_log(capfd, calls: list[tuple[str, str, bytes | None]]) -> tuple[list[tuple[int, dict]], str]:
    """Starts a server (with a ``/fail`` route), makes the ``(method, route, body)`` calls, stops it; returns the
    answers and what the server wrote to stderr meanwhile (its uvicorn log handler is made under ``capfd``)."""
    capfd.readouterr()
    app = create_app("agentfly/Arith-Calc", KWARGS)
    app.get("/fail")(fail)
    with ServerThread(app) as url:
        answers = [request(url + route, method, body) for method, route, body in calls]
    return answers, capfd.readouterr().err


@pytest.mark.parametrize("group", CASES)
def test_bad_requests_get_a_4xx_and_one_line_without_a_traceback(capfd, group):
    calls = [case[:3] for case in CASES[group]]
    answers, log = answers_and_log(capfd, calls)
    for (method, route, body, status, message), (got_status, got) in zip(CASES[group], answers, strict=True):
        assert (got_status, list(got)) == (status, ["error"]), (method, route, body, got)
        assert got["error"].startswith(message) and "\n" not in got["error"], (method, route, body, got)
    assert "Traceback" not in log and len(log.splitlines()) <= len(calls), log


def test_a_server_failure_is_a_500_in_one_line_with_its_traceback_in_the_log(capfd):
    [(status, answer)], log = answers_and_log(capfd, [("GET", "/fail", None)])
    assert (status, answer) == (500, {"error": "server error: RuntimeError: the env broke"})
    assert "Traceback" in log and "RuntimeError: the env" in log  # so the clean logs above are real


def test_http_and_websocket_refuse_with_the_same_messages():
    from websockets.sync.client import connect

    with ServerThread(create_app("agentfly/Arith-Calc", KWARGS)) as url:
        http = [request(url + route, "POST", json.dumps(body).encode())[1]["error"] for route, body, _ in SAME_REFUSALS]
        websocket = []
        with connect(url.replace("http", "ws") + "/ws") as ws:
            for _, _, message in SAME_REFUSALS:
                ws.send(json.dumps(message))
                websocket.append(json.loads(ws.recv(timeout=10))["data"]["message"])
    assert http == websocket
