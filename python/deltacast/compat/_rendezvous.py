"""What the ranks of a ParameterServer world agree on, through a key-value
store: torch.distributed's TCPStore on MASTER_ADDR, as checkpoint-engine
uses. Every exchange has a deadline and names the ranks that did not take
part, so a rank that died makes the others raise instead of hanging, and
rank 0 (which holds the store) going away is reported as such."""
import json
import time
from datetime import timedelta

from ..errors import ConnectionError, InvalidArgumentError, TimeoutError, UpdateError  # noqa: F401 (UpdateError: re-exported)

_POLL_SECONDS = 0.01
# The least a rank waits for rank 0's store at its start (torch's own TCPStore default).
DEFAULT_START_SECONDS = 300.0


def agreed(outcomes, what, also=()):
    """Raises UpdateError on every rank when any rank's outcome (one per rank, None: fine) is an
    error, or `also` (problems that are no rank's, such as workers') is not empty: every rank took
    part in the exchange, so all of them go on to the next one together."""
    problems = [f"rank {rank}: {error}" for rank, error in enumerate(outcomes) if error] + list(also)
    if problems:
        raise UpdateError(f"{what} failed: " + "; ".join(problems))


def error_text(e):
    return f"{type(e).__name__}: {e}"


def seconds_of(timeout, what="timeout"):
    """A timedelta or a number of seconds, as seconds (None: no limit)."""
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise InvalidArgumentError(f"{what}: {timeout!r} is not a timedelta or a number of seconds")
    return float(timeout)


class _LocalStore:
    """A world of one rank without torch."""

    def __init__(self):
        self._values = {}

    def set(self, key, value):
        self._values[key] = value

    def get(self, key):
        return self._values[key]

    def add(self, key, amount):
        self._values[key] = self._values.get(key, 0) + amount
        return self._values[key]

    def wait(self, keys, timeout=None):
        missing = [k for k in keys if k not in self._values]
        if missing:
            raise RuntimeError(f"Timeout waiting for {missing}")

    def delete_key(self, key):
        return self._values.pop(key, None) is not None


def torch_module():
    try:
        import torch
        import torch.distributed  # noqa: F401
    except ImportError:
        raise InvalidArgumentError("a ParameterServer world of several ranks needs torch (torch.distributed's "
                                   "TCPStore carries the rendezvous, as in checkpoint-engine)") from None
    return torch


class Rendezvous:
    """Gathers and barriers among `world_size` ranks. Every rank calls the same
    exchanges in the same order (they are numbered)."""

    def __init__(self, rank, world_size, master_addr, master_port, timeout, start_timeout=None):
        """`timeout`: how long an exchange waits for the ranks that have not come. `start_timeout`
        (default: the longer of `timeout` and 5 minutes): how long a rank waits for rank 0's store
        to appear. Ranks start apart: rank 0 may still be importing torch or reading its checkpoint
        when the others are ready, and a death-detecting `timeout` of seconds would fail the job at
        its start."""
        self.rank, self.world_size, self.timeout = rank, world_size, timeout
        start_timeout = max(timeout, DEFAULT_START_SECONDS) if start_timeout is None else start_timeout
        self._round = 0
        self._previous = None  # the last exchange's key prefix, deleted once the next one completed
        if world_size == 1:
            # One rank needs no server; with torch, an in-process store can also carry a process group.
            try:
                import torch.distributed
                self.store = torch.distributed.HashStore()
            except (ImportError, AttributeError):
                self.store = _LocalStore()
            return
        torch = torch_module()
        # The master does not wait for the others here: the first exchange does, and names who is
        # missing. torch's client backs off between connection attempts and gives up once the next
        # wait would pass its timeout, up to a second before it: the attempts go on until
        # start_timeout has passed in full, as documented.
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                self.store = torch.distributed.TCPStore(
                    master_addr, int(master_port), world_size, rank == 0,
                    timedelta(seconds=max(deadline - time.monotonic(), 0.1)), wait_for_workers=False)
                break
            except (RuntimeError, OSError) as e:  # torch 1.x: the builtin TimeoutError; 2.x: DistNetworkError
                if rank == 0 or time.monotonic() >= deadline:  # rank 0 serves: its errors do not pass
                    raise ConnectionError(
                        f"rank {rank}: no rendezvous with rank 0 at {master_addr}:{master_port} within "
                        f"{start_timeout:.0f} s (rank 0 serves the ranks' store: is it running, with the same "
                        f"MASTER_ADDR and MASTER_PORT?): {e}") from None
                time.sleep(min(0.1, max(deadline - time.monotonic(), 0)))
        # From here on, the store's own waits are the exchanges'.
        self.store.set_timeout(timedelta(seconds=timeout))

    def gather(self, what, value, timeout=None):
        """Every rank's `value` (JSON-able), in rank order. Raises TimeoutError naming
        the ranks missing after `timeout` seconds (default: the rendezvous timeout)."""
        self._round += 1
        prefix = f"deltacast/{self._round}/{what}/"
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        try:
            self.store.set(prefix + str(self.rank), json.dumps(value))
            # A count of the ranks that set theirs: TCPStore in older torch has no check().
            self.store.add(prefix + "count", 1)
            while self.store.add(prefix + "count", 0) < self.world_size:
                if time.monotonic() >= deadline:
                    missing = [r for r in range(self.world_size) if not self._has(prefix + str(r))]
                    raise TimeoutError(f"{what}: rank(s) {', '.join(map(str, missing))} of {self.world_size} did "
                                       f"not take part within {self.timeout if timeout is None else timeout:.0f} s "
                                       f"(dead, or not calling it)")
                time.sleep(_POLL_SECONDS)
            values = [json.loads(self.store.get(prefix + str(r))) for r in range(self.world_size)]
            self._forget_previous(prefix)
            return values
        except RuntimeError as e:  # the store's connection: rank 0 is gone
            raise ConnectionError(f"{what}: lost the rendezvous store that rank 0 serves ({e})") from None

    def _forget_previous(self, prefix):
        # Every rank set its key of this exchange, so every rank is done reading the last one:
        # its keys can go (the store lives as long as the job, rank 0 holds it in memory).
        if self._previous is not None:
            self.store.delete_key(self._previous + str(self.rank))
            if self.rank == 0:
                self.store.delete_key(self._previous + "count")
        self._previous = prefix

    def _has(self, key):
        try:
            self.store.wait([key], timedelta(milliseconds=10))
            return True
        except RuntimeError:
            return False

    def barrier(self, what, timeout=None):
        self.gather(what, None, timeout)
