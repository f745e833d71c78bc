"""Workers report each update's outcome to the trainer rank whose handle they
took, as checkpoint-engine's workers answer on its ZMQ socket: that is how
``ParameterServer.update`` names the worker that failed, even where the
inference server's HTTP answer carries no detail (vLLM's /collective_rpc
answers a worker's exception with a bare 500). A report is one JSON line;
anything else (too long, not JSON, another update's nonce) is dropped with
the connection."""
import json
import socket
import socketserver
import threading
import time

_MAX_LINE = 64 * 1024
_MAX_CONNECTIONS = 64


class ReplyListener:
    """Collects the reports of one update (those carrying `nonce`), listening on `host` (the
    address workers reach this rank at)."""

    def __init__(self, host, nonce):
        self.nonce = nonce
        self.reports = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)
        listener = self

        class _Handler(socketserver.StreamRequestHandler):
            timeout = 10

            def handle(self):
                if not listener._slots.acquire(blocking=False):
                    return  # more connections at once than workers would open: dropped
                try:
                    line = self.rfile.readline(_MAX_LINE + 1)
                    report = json.loads(line) if 0 < len(line) <= _MAX_LINE else None
                    if listener._accept(report):
                        self.wfile.write(b"ok\n")
                except (OSError, ValueError, RecursionError):  # RecursionError: absurdly nested JSON
                    return
                finally:
                    listener._slots.release()

        self._server = socketserver.ThreadingTCPServer((host, 0), _Handler, bind_and_activate=True)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="deltacast-replies",
                                        daemon=True)
        self._thread.start()

    @property
    def port(self):
        return self._server.server_address[1]

    def _accept(self, report):
        if not isinstance(report, dict) or report.get("nonce") != self.nonce:
            return False
        worker, error = report.get("worker"), report.get("error")
        if not isinstance(worker, str) or not (error is None or isinstance(error, str)):
            return False
        index, of = report.get("index"), report.get("of")
        if (index, of) != (None, None) and not _place(index, of):
            return False
        result = report.get("result")
        if result is not None and not isinstance(result, dict):
            return False
        with self._lock:
            self.reports.append({"worker": worker[:256], "error": None if error is None else error[:16384],
                                 "index": index, "of": of, "result": result})
        return True

    def wait_all(self, deadline):
        """Until every worker reported (as many as the reports' `of` say) or time.monotonic()
        passes `deadline`; returns the workers (indices) that did not report, None when no report
        said how many there are."""
        while True:
            with self._lock:
                counts = {r["of"] for r in self.reports if r["of"] is not None}
                seen = {r["index"] for r in self.reports if r["index"] is not None}
            if counts:
                missing = sorted(set(range(max(counts))) - seen)
                if not missing or time.monotonic() >= deadline:
                    return missing
            elif time.monotonic() >= deadline:
                return None
            time.sleep(0.02)

    def failures(self):
        with self._lock:
            return [r for r in self.reports if r["error"] is not None]

    def close(self):
        self._server.shutdown()
        self._server.server_close()


def _place(index, of):
    """Whether (index, of) is a worker's place among `of` workers."""
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (index, of))
    return ints and 0 <= index < of <= 1 << 20


def send_report(address, nonce, worker, error, timeout=10.0, index=None, of=None, result=None):
    """Tells the listener at `address` (host:port) how this worker's update went (error None:
    applied; `result`: what it took, a small dict); `index` of `of`: this worker's place among the
    engine's workers, so the listener can tell which never reported. Best effort: a trainer that
    is gone is not the worker's failure."""
    if not address:
        return False
    host, _, port = address.rpartition(":")
    report = {"nonce": nonce, "worker": worker, "error": error}
    if index is not None:
        report.update(index=index, of=of)
    if result is not None:
        report["result"] = result
    line = json.dumps(report).encode() + b"\n"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as s:
            s.sendall(line)
            return s.makefile("rb").readline(16) == b"ok\n"
    except (OSError, ValueError):
        return False
