"""Routes from a Git repository: a local path or URL, one branch, one subdirectory.

Each commit is taken whole or not at all. Files may also hold ReferenceGrant documents
(``model/reference_grants.py``), which count for this source's routes only. An invalid file keeps the last good commit
live and leaves an error naming the commit, file, line, field and reason. A document
claiming a namespace the source is not bound to (``model/namespace_binding.py``) is
refused alone, named the same way, and the rest of the commit serves. Files are
parsed once per content (path + blob id), so a commit that changes one file re-parses
one file and yields the same Route objects for the rest.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from control_plane import metrics
from control_plane.errors import Problem, SourceError
from control_plane.heap import collector_paused
from control_plane.model.loading import Documents, duplicate_problems, parse_documents
from control_plane.model.namespace_binding import NamespaceBinding, bind_documents
from control_plane.model.references import ReferenceGrant
from control_plane.model.route import Origin, Route
from control_plane.sources.base import PublishRoutes, RouteFeedback, RouteSet
from control_plane.sources.git_feedback import GitFeedback
from control_plane.sources.git_cli import TreeEntry, git, list_tree, read_blobs
from control_plane.sources.git_url_redaction import redact_text, redact_url
from servicekit.audit import CONFIG_APPLIED, CONFIG_REJECTED, INSTANCE, AuditEvent, AuditSink, LogAuditSink

log = structlog.get_logger(component="source.git")

ROUTE_SUFFIXES = (".yaml", ".yml")


@dataclass
class SyncResult:
    commit: str
    accepted: bool
    changed: bool
    problems: list[Problem] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "accepted": self.accepted,
            "changed": self.changed,
            "problems": [str(p) for p in self.problems],
        }


@dataclass(frozen=True)
class GitSettings:
    name: str
    repo: str
    branch: str = "main"
    path: str = ""
    poll_interval: float = 1.0
    fetch_timeout: float = 30.0
    cache_dir: Path = Path.home() / ".cache" / "gatehouse" / "git"
    binding: NamespaceBinding = NamespaceBinding("sources.git", None)
    """The namespaces its files may claim; by default only ``default``."""


class GitSource:
    """A route source. Git routes have no object to write a status on: conflicts and
    references no grant permits are logged and listed in /status by the control plane,
    NACKs reported there and in metrics; the Kubernetes Routes its routes replace are
    listed in its own /status entry (``git_feedback.py``)."""

    def __init__(self, settings: GitSettings, *, audit: AuditSink | None = None) -> None:
        self.name = settings.name
        self._feedback = GitFeedback(settings.name)
        self._refused: list[Problem] = []
        """Documents of the served commit refused for the namespace they claim."""
        self._audit = audit or LogAuditSink()
        self._settings = settings
        key = hashlib.sha256(f"{settings.repo}\0{settings.branch}".encode()).hexdigest()[:16]
        self._mirror = settings.cache_dir / key
        self._lock = asyncio.Lock()
        self._wakeup = asyncio.Event()
        self._files: dict[tuple[str, str], Documents] = {}
        self._seen = ""
        self._accepted = ""
        self._accepted_routes = 0
        self._accepted_grants = 0
        self._rejected: SyncResult | None = None
        self._last_error = ""
        self._last_sync = 0.0
        self._publish: PublishRoutes | None = None
        self.synced = asyncio.Event()
        """Set once the first commit has been applied or rejected."""

    @property
    def feedback(self) -> RouteFeedback | None:
        return self._feedback

    async def run_routes(self, publish: PublishRoutes) -> None:
        self._publish = publish
        while True:
            try:
                await self.sync()
            except SourceError as exc:
                self._last_error = str(exc)
                metrics.SOURCE_SYNCS.labels(self.name, "error").inc()
                log.warning("git_sync_failed", source=self.name, error=str(exc))
            try:
                await asyncio.wait_for(self._wakeup.wait(), self._settings.poll_interval)
            except asyncio.TimeoutError:
                pass
            self._wakeup.clear()

    def trigger(self) -> None:
        """Sync now instead of at the next poll (a webhook calls this)."""
        self._wakeup.set()

    async def sync(self) -> SyncResult:
        """Fetch, and apply the branch head if it moved. Serialised with the poll loop."""
        async with self._lock:
            seen_at = time.monotonic()
            await self._fetch()
            commit = (await git("rev-parse", "--verify", self._ref + "^{commit}", cwd=self._mirror)).decode().strip()
            self._last_sync = time.time()
            self._last_error = ""
            if commit == self._seen:
                metrics.SOURCE_SYNCS.labels(self.name, "unchanged").inc()
                rejected = self._rejected if self._rejected and self._rejected.commit == commit else None
                problems = rejected.problems if rejected else []
                return SyncResult(commit, accepted=commit == self._accepted, changed=False, problems=problems)
            result = await self._load(commit, seen_at)
            self._seen = commit
            self.synced.set()
            return result

    @property
    def _ref(self) -> str:
        return f"refs/heads/{self._settings.branch}"

    async def _fetch(self) -> None:
        if not (self._mirror / "HEAD").exists():
            self._mirror.mkdir(parents=True, exist_ok=True)
            await git("init", "--bare", "--quiet", str(self._mirror))
        try:
            await git(
                "fetch",
                "--quiet",
                "--no-tags",
                "--force",
                self._settings.repo,
                f"+{self._ref}:{self._ref}",
                cwd=self._mirror,
                timeout=self._settings.fetch_timeout,
            )
        except SourceError as exc:
            # git's stderr may echo the URL, credentials and all: the message goes to
            # /status, the log and POST /sync's answer.
            raise SourceError(redact_text(str(exc), self._settings.repo), transient=exc.transient) from None

    async def _load(self, commit: str, seen_at: float) -> SyncResult:
        entries = [e for e in await list_tree(self._mirror, commit, self._settings.path) if e.path.endswith(ROUTE_SUFFIXES)]
        missing = [e for e in entries if (e.path, e.blob) not in self._files]
        contents = await read_blobs(self._mirror, sorted({e.blob for e in missing}))
        files, routes, grants, problems, refused = await asyncio.to_thread(self._assemble, entries, missing, contents, commit)
        self._files = files
        if problems:
            result = SyncResult(commit, accepted=False, changed=True, problems=problems)
            self._rejected = result
            metrics.SOURCE_REJECTIONS.labels(self.name).inc()
            metrics.SOURCE_SYNCS.labels(self.name, "rejected").inc()
            log.error(
                "git_commit_rejected",
                source=self.name,
                commit=commit,
                serving=self._accepted or None,
                problems=[str(p) for p in problems],
            )
            self._audit.emit(AuditEvent(
                kind=CONFIG_REJECTED, actor="control_plane", subject=f"git:{self.name}", reason="invalid routes",
                details={"commit": commit, "serving": self._accepted or None, "problems": len(problems),
                         "first_problem": str(problems[0])[:500], "instance": INSTANCE},
            ))
            return result
        self._accepted = commit
        self._accepted_routes = len(routes)
        self._accepted_grants = len(grants)
        self._rejected = None
        self._refuse(commit, refused)
        metrics.SOURCE_SYNCS.labels(self.name, "applied").inc()
        metrics.ROUTES_LOADED.labels(self.name).set(len(routes))
        log.info("git_commit_applied", source=self.name, commit=commit, routes=len(routes))
        self._audit.emit(AuditEvent(
            kind=CONFIG_APPLIED, actor="control_plane", subject=f"git:{self.name}",
            details={"commit": commit, "routes": len(routes), "instance": INSTANCE},
        ))
        if self._publish is not None:
            self._publish(RouteSet(self.name, commit, tuple(routes), seen_at, grants=tuple(grants)))
        return SyncResult(commit, accepted=True, changed=True)

    def _assemble(
        self, entries: list[TreeEntry], missing: list[TreeEntry], contents: dict[str, bytes], commit: str
    ) -> tuple[dict[tuple[str, str], Documents], list[Route], list[ReferenceGrant], list[Problem], list[Problem]]:
        """Parse the new files and put the commit together, in a worker thread: at 10k
        routes even the duplicate check held the event loop for 140 ms. The last list: the
        documents refused for the namespace they claim (they do not stop the commit)."""
        with collector_paused():
            parsed = {
                (entry.path, entry.blob): parse_documents(contents[entry.blob], Origin("git", entry.path, commit))
                for entry in missing
            }
            files = {(e.path, e.blob): self._files.get((e.path, e.blob)) or parsed[(e.path, e.blob)] for e in entries}
            bound: list[Documents] = []
            refused: list[Problem] = []
            for (path, _), found in files.items():
                kept, refusals = bind_documents(found, self._settings.binding, self._relative(path))
                bound.append(kept)
                refused.extend(refusals)
            routes = [route for found in bound for route in found.routes]
            grants = [grant for found in bound for grant in found.grants]
            problems = [problem for found in bound for problem in found.problems]
            problems.extend(duplicate_problems(routes))
            problems.extend(duplicate_problems(grants, "ReferenceGrant"))
        return files, routes, grants, problems, refused

    def _relative(self, path: str) -> str:
        """A tree path relative to the source's ``path`` (what ``namespacesByPath`` names)."""
        root = self._settings.path.strip("/")
        return path[len(root) + 1 :] if root and path.startswith(root + "/") else path

    def _refuse(self, commit: str, refused: list[Problem]) -> None:
        """Log the applied commit's refused documents when they change; /status lists them."""
        if [str(p) for p in refused] != [str(p) for p in self._refused] and refused:
            log.error("git_documents_refused", source=self.name, commit=commit, problems=[str(p) for p in refused])
        self._refused = refused

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": "git",
            "repo": redact_url(self._settings.repo),
            "branch": self._settings.branch,
            "path": self._settings.path,
            "serving": self._accepted or None,
            "routes": self._accepted_routes,
            "reference_grants": self._accepted_grants,
            "refused": [str(p) for p in self._refused] or None,
            "replaces": self._feedback.replaces() or None,
            "latest": self._seen or None,
            "rejected": self._rejected.as_dict() if self._rejected else None,
            "error": self._last_error or None,
            "last_sync": self._last_sync or None,
        }
