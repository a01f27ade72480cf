"""What a handler is given besides a request's body (``RequestContext``), and the
shapes of the listener's callbacks. Split from ``replog.server.network``, which builds
the contexts and re-exports these names (the handlers import them from there)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from replog.security.principal import ANONYMOUS, KafkaPrincipal


@dataclass(slots=True)
class RequestContext:
    """What a handler knows about the request besides its body (built positionally by
    ``KafkaConnectionProtocol._request``: a new field goes there too)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    # Who sent it: set by the connection's authentication (TLS client certificate or
    # SASL); ``User:ANONYMOUS`` on a listener that does not authenticate.
    principal: KafkaPrincipal = ANONYMOUS
    # Request stages (``time.monotonic()`` seconds), as Kafka's RequestMetrics splits them:
    # read off the socket, handler started, handler done; ``remote_s`` is the part of the
    # handler's time spent waiting on others (acks=all, a fetch's long poll), which the
    # handler adds itself.
    received_s: float = 0.0
    started_s: float = 0.0
    handled_s: float = 0.0
    remote_s: float = 0.0
    # The request's name in the metrics when not the API's (FetchConsumer, FetchFollower).
    request_name: str | None = None
    # The listener it came in on (Metadata answers with that listener's endpoints).
    listener: str = "PLAINTEXT"


Handler = Callable[[RequestContext, Any], Awaitable[Any]]
# Called once a request's response is handed to the socket (or dropped, acks=0), with the
# time it was: the request metrics.
RequestObserver = Callable[[RequestContext, float], None]
