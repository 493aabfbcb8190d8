"""The judge's client against real HTTP servers on 127.0.0.1 that misbehave as a judge can: one that answers with
unusable JSON before a good answer (retried), one that accepts connections and never answers (each try cut at
``timeout_s``, then an infrastructure failure). The real vLLM judge's tests are in tests/train/test_judge.py."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentfly_envs import InfrastructureError
from agentfly_envs.judge import JudgeClient, JudgedEpisode, JudgeSettings, JudgeUnavailableError, make_judge

pytest.importorskip("openai", reason="the judge extra (openai) is not installed")


def _serve(answers: list[str]) -> tuple[ThreadingHTTPServer, list[dict]]:
    """A server whose chat completions give ``answers`` in turn (the last one again after), recording each body."""
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            content = answers[min(len(bodies), len(answers)) - 1]
            reply = {"id": "x", "object": "chat.completion", "created": 0, "model": "judge",
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": content}}]}  # fmt: skip
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, bodies


EPISODE = JudgedEpisode("What is 2 + 2?", "4", "user: What is 2 + 2?\n\nassistant: 4", "4")


def test_an_unusable_answer_is_retried_and_a_repeated_answer_comes_from_the_cache():
    server, bodies = _serve(['{"reasoning": "cut', '{"reasoning":"right","score":8}'])
    client = JudgeClient(JudgeSettings(f"http://127.0.0.1:{server.server_port}/v1", model="judge", retries=1))
    judge = make_judge("judge", client)
    try:
        (first,) = client.run(judge.judge_group([EPISODE]))
        (again,) = client.run(judge.judge_group([EPISODE]))
    finally:
        client.close()
        server.shutdown()
    assert first == again and (first.score, first.reasoning) == (0.8, "right")
    assert (client.failures, client.calls, client.cache_hits, len(bodies)) == (1, 1, 1, 2)
    assert (
        bodies[0]["structured_outputs"] == {"regex": judge.pattern} and "2 + 2" in bodies[0]["messages"][0]["content"]
    )


def test_a_judge_that_never_answers_is_cut_at_its_timeout_and_is_an_infrastructure_failure():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # connections are accepted by the kernel and never answered
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    client = JudgeClient(JudgeSettings(url, model="judge", timeout_s=0.3, retries=1))
    start = time.monotonic()
    try:
        with pytest.raises(JudgeUnavailableError) as raised:
            client.run(make_judge("judge", client).judge_group([EPISODE]))
    finally:
        client.close()
        listener.close()
    assert isinstance(raised.value, InfrastructureError) and time.monotonic() - start < 5
    assert str(raised.value) == f"the judge at {url} failed 2 tries (APITimeoutError: Request timed out.)"
    assert client.failures == 2 and client.calls == 0
