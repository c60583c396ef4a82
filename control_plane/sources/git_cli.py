"""Asynchronous git plumbing with a timeout on every call.

Git is driven as a subprocess (the reference implementation, every transport and
credential helper) and never from the event loop's thread.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from control_plane.errors import SourceError

GIT_ENV = {
    **os.environ,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "true",
    "LC_ALL": "C",
}


@dataclass(frozen=True, slots=True)
class TreeEntry:
    path: str
    blob: str


def _run(argv: list[str], cwd: Path | None, stdin: bytes | None, timeout: float, started: list[subprocess.Popen[bytes]]) -> tuple[int, bytes, bytes]:
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=GIT_ENV,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        started.append(process)
        try:
            out, err = process.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
        return process.returncode, out, err


async def git(*args: str, cwd: Path | None = None, timeout: float = 30.0, stdin: bytes | None = None) -> bytes:
    """Run git; SourceError on failure or timeout (transient: the next poll retries).

    The child is spawned from a worker thread: the spawning thread waits until the child
    has exec'd (vfork), which on a loaded machine held the event loop for 330 ms. A
    cancelled call kills its child, so shutdown never waits for a fetch's timeout.
    """
    started: list[subprocess.Popen[bytes]] = []
    try:
        code, out, err = await asyncio.to_thread(_run, ["git", *args], cwd, stdin, timeout, started)
    except subprocess.TimeoutExpired:
        raise SourceError(f"git {args[0]} timed out after {timeout:.0f}s", transient=True) from None
    except OSError as exc:
        raise SourceError(f"git {args[0]} could not run: {exc}", transient=True) from None
    except asyncio.CancelledError:
        for process in started:
            process.kill()
        raise
    if code != 0:
        message = err.decode(errors="replace").strip().splitlines()
        detail = message[-1] if message else f"exit code {code}"
        raise SourceError(f"git {args[0]} failed: {detail}", transient=True)
    return out


async def list_tree(repo: Path, commit: str, subdir: str) -> list[TreeEntry]:
    args = ["ls-tree", "-r", "-z", "--full-tree", commit]
    if subdir:
        args += ["--", subdir.rstrip("/") + "/"]
    out = await git(*args, cwd=repo)
    entries = []
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        _mode, kind, blob = meta.split(b" ")
        if kind == b"blob":
            entries.append(TreeEntry(path.decode(), blob.decode()))
    return entries


async def read_blobs(repo: Path, blobs: Sequence[str], timeout: float = 60.0) -> dict[str, bytes]:
    """Many blobs in one `git cat-file --batch` process."""
    if not blobs:
        return {}
    out = await git("cat-file", "--batch", cwd=repo, timeout=timeout, stdin=("\n".join(blobs) + "\n").encode())
    contents: dict[str, bytes] = {}
    position = 0
    for blob in blobs:
        header_end = out.index(b"\n", position)
        header = out[position:header_end].split(b" ")
        if len(header) != 3:
            raise SourceError(f"git cat-file: object {blob} is missing", transient=False)
        size = int(header[2])
        start = header_end + 1
        contents[blob] = out[start : start + size]
        position = start + size + 1
    return contents
