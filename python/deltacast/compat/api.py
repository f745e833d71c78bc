"""checkpoint-engine's request_inference_to_update: asks an inference server
(vLLM's /collective_rpc) to run update_weights_from_ipc on its workers, over
HTTP or a Unix socket. Standard library only."""
import http.client
import json
import socket
from urllib.parse import urlsplit

from ..errors import ConnectionError, InvalidArgumentError


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, host, timeout):
        super().__init__(host or "localhost", timeout=timeout)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


class InferenceRequestError(ConnectionError):
    """The inference server answered with an error status; the message has its body."""


def post_json(url, body, timeout, uds=None):
    """POSTs `body` as JSON; returns the decoded answer (None when empty). Raises
    InferenceRequestError on an error status, deltacast.ConnectionError when unreachable."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or (not parts.netloc and uds is None):
        raise InvalidArgumentError(f"url: {url!r} is not an http(s)://host:port/path URL")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if uds is not None:
        connection = _UnixHTTPConnection(uds, parts.hostname, timeout)
    elif parts.scheme == "https":
        connection = http.client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=timeout)
    else:
        connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        connection.request("POST", path, body=json.dumps(body).encode(),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read()
    except OSError as e:
        raise ConnectionError(f"{url}{f' (via {uds})' if uds else ''}: {e}") from None
    finally:
        connection.close()
    if response.status >= 400:
        raise InferenceRequestError(f"{url} answered {response.status} {response.reason}: "
                                    f"{data[:4096].decode(errors='replace')}")
    return json.loads(data) if data else None


def request_inference_to_update(url, socket_paths, timeout=300.0, uds=None):
    """Asks the server at ``url`` (e.g. http://localhost:8000/collective_rpc) to run
    ``update_weights_from_ipc(socket_paths)`` on its workers, and returns when it answered
    (vLLM answers once every worker ran it). ``socket_paths``: {device_uuid: handle}.
    ``uds``: a Unix socket path to send the request over. Raises on an error status."""
    if not isinstance(socket_paths, dict):
        raise InvalidArgumentError("socket_paths: give {device_uuid: handle}, e.g. dict(socket_paths[a:b])")
    post_json(url, {"method": "update_weights_from_ipc", "args": [socket_paths], "timeout": timeout},
              timeout, uds)
