"""Chaining our checks in front of the handlers FLARE's server registers on its cell (registration, heartbeat): each
wrapper calls the handler registered before it, FLARE's own or another component's wrapper."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nvflare.fuel.f3.cellnet.defs import CellChannel
from nvflare.fuel.f3.message import Message

Handler = Callable[[Message], Message]


def current_handler(server: Any, topic: str, fallback: Handler) -> Handler:
    """The handler now registered for `topic` on `server`'s (FLARE's FederatedServer) main channel, so that ours
    chains; `fallback` (FLARE's method) where none is found."""
    registered = server.cell.core_cell.req_reg.find(CellChannel.SERVER_MAIN, topic)
    if registered is None or not callable(getattr(registered, "cb", None)):
        return fallback

    def call(request: Message) -> Message:
        return registered.cb(request, *registered.args, **registered.kwargs)

    return call


def install(server: Any, topic: str, handler: Handler) -> None:
    server.cell.register_request_cb(channel=CellChannel.SERVER_MAIN, topic=topic, cb=handler)
