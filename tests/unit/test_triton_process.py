"""The launcher's readiness check, against real HTTP servers standing in for Triton's
HTTP and metrics services (no tritonserver)."""

from http.server import BaseHTTPRequestHandler

from operations.triton_process import TritonProcess
from tests.servers import serving


class Answer(BaseHTTPRequestHandler):
    """200 to any GET."""

    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_triton_is_ready_only_once_its_metrics_answer_too():
    # Triton 2.51 starts its metrics service ~40 ms after saying ready on HTTP: a test
    # that read the metrics at once was refused.
    with serving(Answer) as http_port:
        with serving(Answer) as free_port:
            pass  # closed: nothing listens there now
        assert not TritonProcess(http_port=http_port, metrics_port=free_port).is_ready()
        with serving(Answer) as metrics_port:
            assert TritonProcess(http_port=http_port, metrics_port=metrics_port).is_ready()
