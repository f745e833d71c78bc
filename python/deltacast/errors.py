"""Exceptions raised by deltacast. Every one derives from DeltacastError, and
the ones with a natural built-in counterpart derive from it too, so that
``except TimeoutError`` or ``except ValueError`` work as a caller expects."""


class DeltacastError(Exception):
    """Base class of every deltacast error."""


class InvalidArgumentError(DeltacastError, ValueError):
    """An argument deltacast cannot use (address, codec, timeout...)."""


class ManifestMismatchError(DeltacastError, ValueError):
    """The consumer's tensors differ from the producer's; the message names
    the first tensor that differs and how (name, dtype, shape or count)."""


class TransportMismatchError(DeltacastError, ValueError):
    """The consumer receives over another data transport than the producer's
    group uses (``transport=``); the message names both."""


class DTypeError(DeltacastError, TypeError):
    """A tensor's dtype is one deltacast does not carry."""


class NotContiguousError(DeltacastError, ValueError):
    """A tensor is not contiguous: deltacast reads and writes tensors in place."""


class DeviceError(DeltacastError, ValueError):
    """A tensor lives where this build cannot read or write it."""


class TokenError(DeltacastError, PermissionError):
    """The producer refused the consumer's token."""


class TimeoutError(DeltacastError, TimeoutError):  # noqa: A001 - deliberately shadows the built-in
    """A wait ran out of time; the engine keeps working."""


class ConnectionError(DeltacastError, ConnectionError):  # noqa: A001
    """The peer could not be reached or went away."""


class CorruptDataError(DeltacastError):
    """Bytes from the network failed validation; nothing was written."""


class UpdateError(DeltacastError, RuntimeError):
    """An update failed on one or more trainer ranks or at their inference workers; every rank
    raises it, naming each rank and worker that failed (the workers keep the previous version)."""


class ClosedError(DeltacastError, RuntimeError):
    """The producer or consumer was closed."""
