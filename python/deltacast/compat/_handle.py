"""What a ParameterServer hands its inference workers in place of
checkpoint-engine's ZMQ socket path, one per device: where the group of
trainer ranks meets (its coordinator), the version to apply, and where to
report back how it went::

    deltacast://10.0.0.1:29601/step-100?version=7&reply=10.0.0.1:41000&nonce=9f3c...
"""
from dataclasses import dataclass
from urllib.parse import parse_qs, quote, unquote, urlsplit

from ..errors import InvalidArgumentError

SCHEME = "deltacast"


@dataclass(frozen=True)
class Handle:
    coordinator: str  # host:port of the group coordinator
    checkpoint: str
    version: int      # the version to wait for (0: whatever the group has first)
    reply: str        # host:port the worker reports its outcome to ("" : nobody listens)
    nonce: str        # ties the report to this update

    def __str__(self):
        return (f"{SCHEME}://{self.coordinator}/{quote(self.checkpoint, safe='')}?version={self.version}"
                f"&reply={self.reply}&nonce={self.nonce}")


def parse(text):
    """A Handle from its text; raises InvalidArgumentError naming what is wrong."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"handle: {text!r} is not a deltacast handle string")
    parts = urlsplit(text)
    if parts.scheme != SCHEME or not parts.netloc:
        raise InvalidArgumentError(f"handle '{text}': not a deltacast://coordinator/checkpoint?version=... handle "
                                   "(a checkpoint-engine ZMQ path? this worker extension takes deltacast's)")
    query = parse_qs(parts.query)
    try:
        version = int(query.get("version", ["0"])[0])
    except ValueError:
        raise InvalidArgumentError(f"handle '{text}': version is not a number") from None
    if version < 0:
        raise InvalidArgumentError(f"handle '{text}': version is negative")
    return Handle(parts.netloc, unquote(parts.path.lstrip("/")), version, query.get("reply", [""])[0],
                  query.get("nonce", [""])[0])
