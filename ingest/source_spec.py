"""What ``RAGLINE_LIFECYCLE_SOURCES`` holds: one :class:`SourceSpec` per source, validated (pure but for the
settings' home). Kept apart from :mod:`.sources` so :mod:`.roots` can name a tenant's source folders
and repositories without the listing code, which itself asks :mod:`.roots` what it may open."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ragline.ingest import git
from ragline.ingest.fetch import host_allowed, redact
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.contracts import Group, Ident


class SourceSpec(BaseModel):
    """One entry of ``RAGLINE_LIFECYCLE_SOURCES``."""

    model_config = ConfigDict(extra="forbid")

    name: Ident
    kind: Literal["folder", "urls", "git"]
    tenant: Ident
    acl: list[Group] = Field(default_factory=list)
    layer: str = "docs"
    path: Path | None = None
    glob: str = "**/*"
    urls: list[str] = Field(default_factory=list)
    # hosts its URLs and their redirects may reach ("docs.example.org", "*.example.org"); empty = any public host
    allowed_hosts: list[str] = Field(default_factory=list)
    # git: a clone URL (instead of a local repository in 'path'), the ref indexed, globs of tracked files
    # to index / leave out, and whether the default skip rules (vendored, lock, minified, generated) apply
    url: str | None = Field(default=None, max_length=4096)
    ref: str = Field(default="HEAD", max_length=255)
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    skip_defaults: bool = True

    @model_validator(mode="after")
    def _kind_fields(self) -> SourceSpec:
        if self.kind == "folder" and self.path is None:
            raise ValueError(f"source {self.name!r}: a folder source needs 'path'")
        if self.kind == "git":
            if (self.path is None) == (self.url is None):
                raise ValueError(f"source {self.name!r}: a git source needs 'path' (a repository) or 'url'")
            if self.url is not None and self.url.startswith("-"):
                raise ValueError(f"source {self.name!r}: not a clone URL")
            git.check_ref(self.ref)
        if self.kind == "urls":
            bad = [u for u in self.urls if not u.startswith(("http://", "https://"))]
            if bad:
                raise ValueError(f"source {self.name!r}: not an http(s) URL: {bad[0]!r}")
            off = [
                u for u in self.urls if self.allowed_hosts and not host_allowed(_host(u), self.allowed_hosts)
            ]
            if off:
                raise ValueError(f"source {self.name!r}: URL outside allowed_hosts: {redact(off[0])!r}")
        return self


def _host(url: str) -> str:
    try:
        return httpx.URL(url).host
    except (httpx.InvalidURL, ValueError):
        return ""


def configured_sources(raw: Iterable[dict]) -> list[SourceSpec]:
    specs = [SourceSpec.model_validate(r) for r in raw]
    names = [s.name for s in specs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"duplicate source names: {sorted(dup)}")
    return specs


def clone_dir(spec: SourceSpec) -> Path:
    """Where a git source's clone URL is kept: ``<home>/git/<tenant>/<name>.git``."""
    return get_settings().home_dir / "git" / spec.tenant / f"{spec.name}.git"


def repository_dir(spec: SourceSpec) -> Path:
    """A git source's repository: its folder (resolved), or its clone."""
    if spec.path is not None:
        return Path(spec.path).expanduser().resolve()
    return clone_dir(spec)
