"""uvicorn's HTTP/1.1 protocol with a deadline on request headers.

uvicorn closes a keep-alive connection that stays idle, but holds one that is still sending its request line or
headers for as long as the client likes, so a few stalled sockets would keep handlers and file descriptors for
ever. This protocol closes a connection whose request headers are not complete ``timeout_s`` after it opened, or
after its previous response ended. The body is the app's to time (``api.py``: 408), and a stream its client stops
reading is cut by the app too (``ServeConfig.stream_idle_timeout_s``).

Imported only by ``duet serve`` and the tests that run a real server; it subclasses whichever protocol uvicorn's
``http="auto"`` picks (httptools when installed, else h11), through the two hooks both share: ``connection_made``
and ``on_response_complete``, and their ``cycle`` (the request in flight, None before the first).
"""

from __future__ import annotations

import asyncio
import logging

from uvicorn.protocols.http.auto import AutoHTTPProtocol

log = logging.getLogger("duet.serve")


def header_timeout_protocol(timeout_s: float) -> type[asyncio.Protocol]:
    """The protocol class to pass as ``uvicorn.Config(http=...)``."""
    if not timeout_s > 0:
        raise ValueError(f"the header timeout must be positive, got {timeout_s}")

    class HeaderTimeoutProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport):  # type: ignore[no-untyped-def]
            super().connection_made(transport)
            self._arm_header_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_header_timer()

        def connection_lost(self, exc):  # type: ignore[no-untyped-def]
            self._disarm_header_timer()
            super().connection_lost(exc)

        def _arm_header_timer(self) -> None:
            self._disarm_header_timer()
            self._header_timer = self.loop.call_later(timeout_s, self._headers_late)

        def _disarm_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                return  # a request is in flight: its headers came
            if not self.transport.is_closing():
                log.info("closing a connection whose request headers did not arrive within %g s", timeout_s)
                self.transport.close()

    return HeaderTimeoutProtocol
