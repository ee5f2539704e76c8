"""The Celery broker transport: kombu's Redis transport, with one fix for losing the connection
while a message is unacknowledged (settings: CELERY_BROKER_TRANSPORT; docs/reliability.md).

When the broker connection drops, Celery's consumer (kombu 5.7.0 / Celery 5.7.0) calls
`connection.collect()` and then `connection.close()`. If the first close of the channel fails
reading the dead socket, `collect()` still detaches the transport (`transport.client = None`),
and the second close then tries to put the channel's unacknowledged messages back through a new
connection built from that missing client: an AttributeError, not a connection error, so
Celery stops the worker ("Unrecoverable error") instead of reconnecting.

Here that restore is skipped when the transport is detached. Nothing is lost: each message
stays in Redis's unacked hash (kombu wrote it there on delivery), and any live consumer's
periodic check (`unacked_restore_interval`, every second here) puts it back on its queue once
it is `visibility_timeout` old (3 s here): the path a worker killed with kill -9 takes.
"""

import logging
from typing import Any

from kombu.transport import redis

logger = logging.getLogger(__name__)


class QoS(redis.QoS):
    def restore_unacked(self, client: Any = None) -> Any:
        transport = self.channel.connection
        if client is None and (transport is None or transport.client is None):
            # No connection parameters left to reach Redis with (and Redis just failed us
            # anyway): leave the messages to the visibility-timeout restore. Clearing the
            # local list keeps restore_unacked_once's bookkeeping consistent.
            delivered: Any = self._delivered  # delivery tag -> message (typed None on the class)
            logger.warning(
                "broker connection closed with %d unacknowledged message(s); "
                "they return to their queue after the visibility timeout",
                len(delivered),
            )
            delivered.clear()
            return None
        return super().restore_unacked(client)


class Channel(redis.Channel):
    QoS = QoS


class Transport(redis.Transport):
    Channel = Channel
