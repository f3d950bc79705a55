"""The HTTP door's own limits, on top of uvicorn's httptools protocol.

uvicorn bounds only the idle time between two requests (`timeout_keep_alive`): a client
that sends half a request line, half its headers or ten bytes of a body and then nothing
(or one byte a second) holds its connection, and its request task, for ever. And when
the app answers before it has read the body (413 by Content-Length, 404, 401...) on a
connection that is to close, uvicorn closes at once: the unread bytes in the kernel's
buffer make it send a RST, and a client still writing its body (Python's urllib and
http.client, curl...) gets "broken pipe" or "connection reset" instead of the answer.

`BoundedHttpToolsProtocol` adds, per request:

- a header deadline, from the connection (or the request's first byte on a kept-alive
  connection) to the end of its headers;
- a body deadline, from the end of the headers to the end of the body; past either the
  client gets 408 (if the request had begun and nothing was answered yet) and the
  connection closes; the app, if it was waiting for the body, sees a disconnect;
- a lingering close: a response that completes before its request's body did is sent,
  then the rest of the body is read and thrown away, up to `linger_max_bytes` and
  `linger_seconds`, and only then is the connection closed (nginx's `lingering_close`).

The limits are totals, not idle times: a client dripping a byte a second is cut too.
"""

from __future__ import annotations

import asyncio
import resource
from dataclasses import dataclass
from typing import Any, cast

from uvicorn.config import Config as UvicornConfig
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from porteiro.config import ServerConfig

_LIMITS = "porteiro_connection_limits"
# No body: the status line says it all, and the connection closes right after.
_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_seconds: float = 10.0
    body_seconds: float = 30.0
    linger_seconds: float = 5.0
    linger_max_bytes: int = 16 * 1024 * 1024

    @classmethod
    def of(cls, server: ServerConfig) -> ConnectionLimits:
        return cls(
            header_seconds=server.header_timeout_seconds,
            body_seconds=server.body_timeout_seconds,
            linger_seconds=server.linger_seconds,
            linger_max_bytes=server.linger_max_bytes,
        )


class _Transport:
    """The connection's transport as the protocol's request cycles see it: a close
    while the request body is still coming becomes a lingering close."""

    __slots__ = ("_protocol", "_transport")

    def __init__(self, transport: asyncio.Transport, protocol: BoundedHttpToolsProtocol) -> None:
        self._transport = transport
        self._protocol = protocol

    def close(self) -> None:
        self._protocol.close_after_response()

    def is_closing(self) -> bool:
        return self._protocol.lingering or self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header and body deadlines and a lingering
    close (the module docstring says why), with the limits `set_limits` gave uvicorn's
    Config (defaults without)."""

    def __init__(self, config: UvicornConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.limits: ConnectionLimits = getattr(config, _LIMITS, None) or ConnectionLimits()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._raw = transport
        # The open phase's deadline (loop time), None while the app works or the
        # connection idles between requests (uvicorn's keep-alive timeout); the timer is
        # armed for it only when a read ends with the phase still open, so a request
        # that comes in one read (most webhooks) costs no timer at all.
        self._deadline: float | None = self.loop.time() + self.limits.header_seconds
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._begun = False  # a byte of the current request has arrived
        self._body_complete = True
        self._lost = False
        self.lingering = False
        self._linger_left = 0
        # Request cycles take the protocol's transport: their close goes through here.
        self.transport = cast(asyncio.Transport, _Transport(transport, self))
        self._sync_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._deadline = None
        self._sync_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.lingering:  # the answer is out: count and drop what is left of the body
            self._linger_left -= len(data)
            if self._linger_left < 0:
                self._raw.close()
            return
        super().data_received(data)
        self._sync_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._begun = True
        if self._deadline is None:  # a kept-alive connection's next request
            self._deadline = self.loop.time() + self.limits.header_seconds

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._body_complete = False
        self._deadline = self.loop.time() + self.limits.body_seconds

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._body_complete = True
        self._begun = False
        self._deadline = None

    def on_response_complete(self) -> None:
        if not self._body_complete:
            self._linger()
        super().on_response_complete()  # while lingering it sees a closing transport

    def close_after_response(self) -> None:
        if self._body_complete or self._lost:
            self._raw.close()
        else:
            self._linger()

    def _linger(self) -> None:
        if self.lingering or self._raw.is_closing():
            return
        self.lingering = True
        self._linger_left = self.limits.linger_max_bytes
        self._deadline = self.loop.time() + self.limits.linger_seconds
        self._sync_timer()
        # The answer is queued; a FIN after it tells the client nothing more comes.
        if self._raw.can_write_eof():
            self._raw.write_eof()
        self.flow.resume_reading()  # reading may have been paused on a full body buffer

    def _late(self) -> None:
        """A deadline passed: the request took too long to arrive, or lingering is over."""
        self._timer = None
        if self._deadline is None or self._raw.is_closing():
            return
        cycle = self.cycle
        if not self.lingering:
            if self._begun and (
                cycle is None or cycle.response_complete or not cycle.response_started
            ):
                self._raw.write(_TIMEOUT_RESPONSE)
            if cycle is not None and not cycle.response_complete:
                # The app, if waiting for the body, reads a disconnect and answers no one.
                cycle.disconnected = True
                cycle.message_event.set()
        self._raw.close()

    def _sync_timer(self) -> None:
        """The timer, made to match the open phase's deadline (or cancelled)."""
        deadline = self._deadline
        timer = self._timer
        if timer is not None:
            if deadline == self._timer_at:
                return
            timer.cancel()
            self._timer = None
        if deadline is not None:
            self._timer = self.loop.call_at(deadline, self._late)
            self._timer_at = deadline


def set_limits(config: UvicornConfig, limits: ConnectionLimits) -> UvicornConfig:
    """Give `config`'s connections these limits. An attribute of uvicorn's Config, not
    of a class made for them: `serve --receivers N` pickles the Config to its processes,
    and a module-level protocol class pickles by name."""
    setattr(config, _LIMITS, limits)
    return config


def raise_open_files_limit() -> int:
    """Raise this process's soft limit on open files to the hard limit (each connection
    is one; a soft limit of 1,024 refuses connections long before the server is busy).
    Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65_536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # a platform's cap under the hard limit: keep soft
            pass
    return soft
