"""The audit spool: a JSON-lines file that holds audit events Kafka has not acknowledged.

``SpoolFile`` is plain blocking file code. ``Spool`` runs every call of it on one
dedicated thread, in submission order, so the event loop never waits on ``fsync`` and
an append submitted before a read or a truncate is always on disk before that runs.

Format: one event per line (compact JSON has no raw newline). A line is complete only
once its ``\\n`` is written and fsynced; a torn tail left by a crash mid-write was never
reported as spooled and is cut off when the file is opened.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

SPOOL_NAME = "audit.spool.jsonl"


class SpoolLockedError(OSError):
    """The spool file is locked by another open ``SpoolFile`` (one writer per spool)."""


class SpoolFile:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        created = not path.exists()
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            raise SpoolLockedError(f"{path}: another process holds this spool; give each process its own spoolDir")
        if created:
            _fsync_dir(path.parent)
        self._cut_torn_tail()

    def _cut_torn_tail(self) -> None:
        size = os.fstat(self._fd).st_size
        if not size:
            return
        if os.pread(self._fd, 1, size - 1) == b"\n":
            return
        chunk = 65536
        end = size
        while end > 0:
            start = max(0, end - chunk)
            data = os.pread(self._fd, end - start, start)
            newline = data.rfind(b"\n")
            if newline >= 0:
                self.truncate(start + newline + 1)
                return
            end = start
        self.truncate(0)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def append(self, records: list[bytes]) -> int:
        """Write the records as lines and fsync; returns the new size."""
        data = b"".join(record + b"\n" for record in records)
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        os.fsync(self._fd)
        return self.size()

    def read(self, offset: int, max_records: int, max_bytes: int = 1 << 20) -> tuple[list[bytes], int]:
        """Up to ``max_records`` complete lines from ``offset``; returns them and the offset after them."""
        data = os.pread(self._fd, max_bytes, offset)
        records: list[bytes] = []
        position = 0
        while len(records) < max_records:
            newline = data.find(b"\n", position)
            if newline < 0:
                break
            records.append(data[position:newline])
            position = newline + 1
        if not records and data and len(data) == max_bytes:
            # One line longer than max_bytes: read exactly that line.
            return self.read(offset, 1, max_bytes * 2)
        return records, offset + position

    def truncate(self, size: int = 0) -> None:
        os.ftruncate(self._fd, size)
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    """``SpoolFile`` on its own writer thread; every method returns an awaitable future, FIFO."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / SPOOL_NAME
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="audit-spool")
        self._file: SpoolFile | None = None

    def _call(self, fn: Callable[[SpoolFile], T]) -> asyncio.Future[T]:
        def run() -> T:
            if self._file is None:
                raise RuntimeError("spool is not open")
            return fn(self._file)

        return asyncio.get_running_loop().run_in_executor(self._executor, run)

    async def open(self) -> int:
        """Open (creating the directory and file); returns the size of what is already spooled."""

        def open_file() -> int:
            self._file = SpoolFile(self.path)
            return self._file.size()

        return await asyncio.get_running_loop().run_in_executor(self._executor, open_file)

    def append(self, records: list[bytes]) -> asyncio.Future[int]:
        return self._call(lambda f: f.append(records))

    def read(self, offset: int, max_records: int) -> asyncio.Future[tuple[list[bytes], int]]:
        return self._call(lambda f: f.read(offset, max_records))

    def truncate(self) -> asyncio.Future[None]:
        return self._call(lambda f: f.truncate(0))

    async def close(self) -> None:
        """Finish every submitted call, then close the file and the thread."""

        def close_file() -> None:
            if self._file is not None:
                self._file.close()
                self._file = None

        await asyncio.get_running_loop().run_in_executor(self._executor, close_file)
        self._executor.shutdown(wait=True)
