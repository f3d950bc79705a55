"""RabbitMQ sink: publish each outbox row to a durable topic exchange.

Every message is persistent, `message_id` = the row's stored message id (stable across
retries, redrives, replays and stores: consumers de-duplicate on it), `content_type`
application/json, routing key `{source}.{kind}` (e.g. `stripe.payment.paid`). It is
published `mandatory` on a channel with publisher confirms: the row is done only once the
broker confirmed it, and a message the broker could not route to any queue comes back
(basic.return) as a failure, retried and then dead-lettered, never counted as delivered.

The connection is plain, not aio-pika's "robust" one: the outbox retry loop already is
the reconnection policy (a failed publish drops the connection; the next attempt opens a
new one), and a hidden background reconnect would only race it.
"""

from __future__ import annotations

import asyncio
import contextlib

import aio_pika
import orjson
from aio_pika.abc import AbstractConnection, AbstractExchange
from aio_pika.exceptions import DeliveryError, PublishError

from porteiro.config import DestinationConfig
from porteiro.errors import ConfigError, error_text
from porteiro.sinks.relay import SendResult
from porteiro.store.outbox import StoredOutboxRow


def routing_key(row: StoredOutboxRow) -> str:
    return f"{row.source}.{row.kind}"


def build_message(row: StoredOutboxRow) -> aio_pika.Message:
    return aio_pika.Message(
        orjson.dumps(row.payload),
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        message_id=row.message_id,
        content_type="application/json",
        type=row.kind,
        app_id="porteiro",
    )


class RabbitSender:
    def __init__(self, destination: DestinationConfig) -> None:
        if destination.rabbitmq_url is None:
            raise ConfigError(f"destination {destination.name!r} needs rabbitmq_url")
        self.url = destination.rabbitmq_url
        self.exchange_name = destination.exchange
        self.timeout = destination.timeout_seconds
        self._connection: AbstractConnection | None = None
        self._exchange: AbstractExchange | None = None
        self._lock = asyncio.Lock()

    async def send(self, row: StoredOutboxRow) -> SendResult:
        exchange: AbstractExchange | None = None
        try:
            exchange = await self._open()
            await exchange.publish(
                build_message(row), routing_key(row), mandatory=True, timeout=self.timeout
            )
        except PublishError as exc:
            # basic.return: the broker is fine, no queue takes this routing key.
            error = f"unroutable: {exc} (bind a queue to {self.exchange_name!r})"
            return SendResult(False, "returned", error, trips_breaker=False)
        except DeliveryError as exc:
            return SendResult(False, "nack", error_text(exc))
        except Exception as exc:  # connection or channel lost, timeout: start afresh
            if exchange is None or exchange is self._exchange:
                await self._drop()
            return SendResult(False, "error", error_text(exc))
        return SendResult(True, "ack")

    async def _open(self) -> AbstractExchange:
        async with self._lock:
            connection = self._connection
            if connection is None or connection.is_closed or self._exchange is None:
                await self._drop()
                connection = await aio_pika.connect(self.url, timeout=self.timeout)
                try:
                    channel = await connection.channel(
                        publisher_confirms=True, on_return_raises=True
                    )
                    self._exchange = await channel.declare_exchange(
                        self.exchange_name, aio_pika.ExchangeType.TOPIC, durable=True
                    )
                except BaseException:
                    await connection.close()
                    raise
                self._connection = connection
            return self._exchange

    async def _drop(self) -> None:
        connection, self._connection, self._exchange = self._connection, None, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()

    async def aclose(self) -> None:
        async with self._lock:
            await self._drop()
