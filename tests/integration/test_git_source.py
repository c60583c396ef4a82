"""The Git source against real repositories: whole commits, precise errors, reuse of
unchanged files, URLs and failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.errors import SourceError
from control_plane.sources.base import RouteSet
from control_plane.sources.git import GitSettings, GitSource
from servicekit.audit import CONFIG_APPLIED, CONFIG_REJECTED, MemoryAuditSink
from tests.harness.binaries import require_binary
from tests.harness.route_repo import RouteRepo, route_doc


@pytest.fixture(autouse=True)
def _git() -> None:
    require_binary("git", "apt-get install git")


def doc(name: str, path: str) -> dict[str, object]:
    return route_doc(name, {"auth": {"required": False}, "match": {"path": path}, "backends": [{"service": "svc", "port": 80}]})


def make_source(
    tmp_path: Path, repo: str, published: list[RouteSet], audit: MemoryAuditSink | None = None, **kwargs: object
) -> GitSource:
    settings = GitSettings(name="routes", repo=repo, path="routes", cache_dir=tmp_path / "cache", **kwargs)  # type: ignore[arg-type]
    source = GitSource(settings, audit=audit or MemoryAuditSink())
    source._publish = published.append  # what run() does before its first sync
    return source


async def test_applies_whole_commits_and_reuses_unchanged_files(tmp_path: Path) -> None:
    repo = RouteRepo(tmp_path / "repo")
    repo.write("a.yaml", [doc("a", "/a")])
    repo.write("b.yaml", [doc("b", "/b")])
    (repo.root / "README.md").write_text("not a route\n")
    (repo.root / "elsewhere").mkdir()
    (repo.root / "elsewhere" / "x.yaml").write_text("outside the configured subdirectory: ignored\n")
    first = repo.commit()
    published: list[RouteSet] = []
    source = make_source(tmp_path, f"file://{repo.root}", published)

    result = await source.sync()
    assert (result.commit, result.accepted, result.changed) == (first, True, True)
    assert sorted(r.id for r in published[-1].routes) == ["default/a", "default/b"]
    assert source.synced.is_set()

    unchanged = await source.sync()
    assert unchanged.changed is False and len(published) == 1

    repo.write("b.yaml", [doc("b", "/b2")])
    second = repo.commit()
    await source.sync()
    routes = {r.id: r for r in published[-1].routes}
    old = {r.id: r for r in published[0].routes}
    assert routes["default/a"] is old["default/a"], "an unchanged file must yield the same Route object"
    assert routes["default/b"] is not old["default/b"]
    assert routes["default/b"].origin.revision == second
    assert source.status()["serving"] == second


async def test_an_invalid_file_rejects_the_commit_and_names_commit_file_line_field(tmp_path: Path) -> None:
    repo = RouteRepo(tmp_path / "repo")
    repo.write("a.yaml", [doc("a", "/a")])
    good = repo.commit()
    published: list[RouteSet] = []
    audit = MemoryAuditSink()
    source = make_source(tmp_path, str(repo.root), published, audit)
    await source.sync()
    [applied] = audit.of_kind(CONFIG_APPLIED)
    assert (applied.subject, applied.details["commit"], applied.details["routes"]) == ("git:routes", good, 1)

    repo.write("a.yaml", [doc("a", "/a-moved")])
    repo.write("nested/bad.yaml", "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: bad}\nspec:\n  match: {path: /x, pathPrefix: /y}\n  backends: [{service: svc, port: 80}]\n")
    bad = repo.commit()
    result = await source.sync()
    assert result.commit == bad and not result.accepted
    assert [str(p) for p in result.problems] == [
        "routes/nested/bad.yaml:5: spec.match: set exactly one of path, pathPrefix, pathRegex (got ['path', 'pathPrefix'])"
    ]
    assert len(published) == 1, "nothing from a rejected commit may be published"
    status = source.status()
    assert status["serving"] == good and status["rejected"]["commit"] == bad
    [rejected] = audit.of_kind(CONFIG_REJECTED)
    assert rejected.actor == "control_plane" and rejected.subject == "git:routes"
    assert (rejected.details["commit"], rejected.details["serving"], rejected.details["problems"]) == (bad, good, 1)
    assert str(rejected.details["first_problem"]).startswith("routes/nested/bad.yaml:5: spec.match:")

    repo.write("dup.yaml", [doc("a", "/dup")])
    repo.remove("nested/bad.yaml")
    repo.commit()
    duplicate = await source.sync()
    assert not duplicate.accepted
    assert "route default/a is already defined at git:routes/a.yaml:1" in str(duplicate.problems[0])


async def test_fetch_failures_are_transient_source_errors(tmp_path: Path) -> None:
    published: list[RouteSet] = []
    missing = make_source(tmp_path, str(tmp_path / "no-such-repo"), published)
    with pytest.raises(SourceError) as error:
        await missing.sync()
    assert error.value.transient
    assert "git fetch failed" in str(error.value)

    repo = RouteRepo(tmp_path / "repo")
    repo.write("a.yaml", [doc("a", "/a")])
    repo.commit()
    wrong_branch = GitSource(GitSettings(name="routes", repo=str(repo.root), branch="release", cache_dir=tmp_path / "c2"))
    with pytest.raises(SourceError, match="couldn't find remote ref refs/heads/release"):
        await wrong_branch.sync()
    assert not published
