"""Asynchronous git plumbing with a timeout on every call.

Git is driven as a subprocess (the reference implementation, every transport and
credential helper) and never from the event loop's thread.
"""

from __future__ import annotations

import asyncio
import os
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


async def git(*args: str, cwd: Path | None = None, timeout: float = 30.0, stdin: bytes | None = None) -> bytes:
    """Run git; SourceError on failure or timeout (transient: the next poll retries)."""
    process = await asyncio.create_subprocess_exec(
        "git",
        *args,
        cwd=cwd,
        env=GIT_ENV,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(stdin), timeout)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        raise SourceError(f"git {args[0]} timed out after {timeout:.0f}s", transient=True) from None
    except asyncio.CancelledError:
        process.kill()
        await process.wait()
        raise
    if process.returncode != 0:
        message = err.decode(errors="replace").strip().splitlines()
        detail = message[-1] if message else f"exit code {process.returncode}"
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
