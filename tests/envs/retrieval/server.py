"""A real Search-R1-style retrieval server for tests: BM25 over given passages, on 127.0.0.1, in a thread.

Paths starting with ``/slow`` answer after 1.5 s, ``/broken`` with HTTP 500, ``/garbage`` with non-JSON.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agentfly_envs.retrieval import BM25Index, Passage


@contextlib.contextmanager
def serve_retrieval(passages: Sequence[Passage]) -> Iterator[str]:
    """Serves ``POST /retrieve`` over ``passages`` until the block ends; yields the server's base URL."""
    index = BM25Index(passages)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path.startswith("/slow"):
                time.sleep(1.5)
            if self.path.startswith("/broken"):
                self._send(500, b"internal error")
            elif self.path.startswith("/garbage"):
                self._send(200, b"<html>not json</html>")
            else:
                hits = [index.search(query, body["topk"]) for query in body["queries"]]
                result = [
                    [{"document": {"id": p.title, "contents": f'"{p.title}"\n{p.text}'}, "score": p.score} for p in h]
                    for h in hits
                ]
                self._send(200, json.dumps({"result": result}).encode())

        def _send(self, status: int, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:  # keep test output quiet
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
