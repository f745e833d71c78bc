"""What a ParameterServer hands its inference workers in place of
checkpoint-engine's ZMQ socket path, one per device: where the group of
trainer ranks meets (its coordinator), which group that is (an id rank 0
draws when it builds the engine: a coordinator address can be reused by the
next job), the version to apply, and where to report back how it went::

    deltacast://10.0.0.1:29601/step-100?group=5e1f...&version=7&reply=10.0.0.1:41000&nonce=9f3c...
"""
from dataclasses import dataclass
from urllib.parse import parse_qs, quote, unquote, urlsplit

from ..errors import InvalidArgumentError

SCHEME = "deltacast"
_FIELDS = ("group", "version", "reply", "nonce")


@dataclass(frozen=True)
class Handle:
    coordinator: str  # host:port of the group coordinator
    checkpoint: str
    version: int      # the version to apply (0: whatever the group has)
    reply: str        # host:port the worker reports its outcome to ("": nobody listens)
    nonce: str        # ties the report to this update
    group: str = ""   # the group's id

    def __str__(self):
        return (f"{SCHEME}://{self.coordinator}/{quote(self.checkpoint, safe='')}?group={self.group}"
                f"&version={self.version}&reply={self.reply}&nonce={self.nonce}")


def parse(text):
    """A Handle from its text; raises InvalidArgumentError naming what is wrong."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"handle: {text!r} is not a deltacast handle string")
    parts = urlsplit(text)
    if parts.scheme != SCHEME or not parts.netloc:
        raise InvalidArgumentError(f"handle '{text}': not a deltacast://coordinator/checkpoint?version=... handle "
                                   "(a checkpoint-engine ZMQ path? this worker extension takes deltacast's)")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - set(_FIELDS))
    repeated = sorted(k for k, v in query.items() if len(v) > 1)
    if unknown or repeated:
        raise InvalidArgumentError(f"handle '{text}': {'unknown' if unknown else 'repeated'} field(s) "
                                   f"{', '.join(unknown or repeated)}")
    try:
        version = int(query.get("version", ["0"])[0])
    except ValueError:
        raise InvalidArgumentError(f"handle '{text}': version is not a number") from None
    if version < 0:
        raise InvalidArgumentError(f"handle '{text}': version is negative")
    field = {k: query.get(k, [""])[0] for k in ("group", "reply", "nonce")}
    return Handle(parts.netloc, unquote(parts.path.lstrip("/")), version, field["reply"], field["nonce"],
                  field["group"])
