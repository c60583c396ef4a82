"""A fake Kafka for unit tests: up or down, acks immediate or held until released."""

from __future__ import annotations

import asyncio
from typing import Any


class FakeBroker:
    def __init__(self) -> None:
        self.up = True
        self.hold = False
        self.records: list[tuple[str, bytes | None, bytes | None]] = []
        self.held: list[tuple[asyncio.Future[Any], tuple[str, bytes | None, bytes | None]]] = []
        self.producers = 0

    def values(self, topic: str) -> list[bytes]:
        return [value for t, value, _ in self.records if t == topic and value is not None]

    def release(self) -> None:
        for future, record in self.held:
            if not future.done():
                self.records.append(record)
                future.set_result(None)
        self.held.clear()

    def fail_held(self) -> None:
        for future, _ in self.held:
            if not future.done():
                future.set_exception(ConnectionError("broker went away"))
        self.held.clear()

    def factory(self) -> FakeProducer:
        self.producers += 1
        return FakeProducer(self)


class FakeProducer:
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.started = False

    async def start(self) -> None:
        if not self.broker.up:
            raise ConnectionError("no broker")
        self.started = True

    async def stop(self) -> None:
        self.started = False

    async def send(self, topic: str, value: bytes | None = None, key: bytes | None = None) -> asyncio.Future[Any]:
        assert self.started
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        record = (topic, value, key)
        if self.broker.hold:
            self.broker.held.append((future, record))
        elif self.broker.up:
            self.broker.records.append(record)
            future.set_result(None)
        else:
            future.set_exception(ConnectionError("no broker"))
        return future
