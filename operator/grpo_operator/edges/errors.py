"""The edges' error contract, once: what a failed call to the API server or to the Ray Jobs API means for a
reconcile. `Unavailable`: nothing new could be observed or done now (the Ray head unreachable or in the client's
backoff, the API server's 5xx or 429, a timeout): the reconcile keeps the last phase, submits nothing and tries
again; it is never read as "the job is gone". `Refused`: the API server refused a child as written (400, 422): this
spec cannot run, `Failed/InvalidSpec` in the server's words. `Conflict`: the object changed under the write (409):
read it again and decide again. Writes that only record (evidence bundles, log tails) are best effort: whatever
they meet becomes a warning event and a note in the status (`captureFailed`), never a skipped stop. Anything else
reaches kopf as a `TemporaryError` with one log line (controller/handlers.py)."""

from __future__ import annotations


class EdgeError(RuntimeError):
    """A call to the API server or to Ray failed in a way the reconcile decides on."""


class Unavailable(EdgeError):
    """Nothing could be observed or done now; try again later, keep what is known."""


class Refused(EdgeError):
    """The API server refused what was sent as written: the spec cannot run as it is."""


class Conflict(EdgeError):
    """The object changed since it was read: read it again."""
