"""The launcher's readiness check, against real HTTP servers standing in for Triton's
HTTP and metrics services (no tritonserver)."""

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from operations.triton_process import TritonProcess


class Answer(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serving():
    """An HTTP server on a free loopback port that answers 200 to any GET; its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_triton_is_ready_only_once_its_metrics_answer_too():
    # Triton 2.51 starts its metrics service ~40 ms after saying ready on HTTP: a test
    # that read the metrics at once was refused.
    with serving() as http_port:
        with serving() as free_port:
            pass  # closed: nothing listens there now
        assert not TritonProcess(http_port=http_port, metrics_port=free_port).is_ready()
        with serving() as metrics_port:
            assert TritonProcess(http_port=http_port, metrics_port=metrics_port).is_ready()
