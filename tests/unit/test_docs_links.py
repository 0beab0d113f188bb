"""Every Markdown link in README.md and docs/ resolves: a relative link names a file or
directory that exists (and an anchor, a heading of the page it points to, as GitHub slugs
it); an external link is well-formed (never fetched: the tests run offline)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^(\s*)(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)]*)\)")
_DESTINATION = re.compile(r"\s*(?:<([^>]*)>|(\S*))(?:\s+\"[^\"]*\")?\s*")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _prose_lines(text: str, *, blank_code: bool = True) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, with code spans blanked (or kept)."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        match = _FENCE.match(line)
        if match:
            if fence is None:
                fence = match.group(2)
            elif match.group(2) == fence:
                fence = None
            continue
        if fence is None and blank_code:
            lines.append((number, _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)))
        elif fence is None:
            lines.append((number, line))
    return lines


def links(text: str) -> list[tuple[int, str]]:
    """``(line, target)`` of every inline, image and reference-definition link."""
    found: list[tuple[int, str]] = []
    for number, line in _prose_lines(text):
        for match in _INLINE.finditer(line):
            destination = _DESTINATION.fullmatch(match.group(1))
            if destination is None:  # spaces in it: not a link Markdown can read
                found.append((number, match.group(1)))
            else:
                found.append((number, destination.group(1) or destination.group(2) or ""))
        reference = _REFERENCE.match(line)
        if reference:
            found.append((number, reference.group(1)))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.lower().strip()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    result: set[str] = set()
    for _number, line in _prose_lines(text, blank_code=False):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def problems(path: Path) -> list[str]:
    """What is wrong with the links of the Markdown file ``path``."""
    text = path.read_text(encoding="utf-8")
    found: list[str] = []
    for number, target in links(text):
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{number}"
        if not target:
            found.append(f"{where}: an empty link")
            continue
        parts = urlsplit(target)
        if parts.scheme in ("http", "https"):
            host = parts.hostname or ""
            if "." not in host or " " in target or not re.fullmatch(r"[\w.-]+", host):
                found.append(f"{where}: {target!r} is not a well-formed URL")
            continue
        if parts.scheme == "mailto":
            if "@" not in parts.path:
                found.append(f"{where}: {target!r} is not an e-mail address")
            continue
        if parts.scheme or parts.netloc:
            found.append(f"{where}: {target!r}: only http(s), mailto and relative links")
            continue
        file_part, _, anchor = target.partition("#")
        destination = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not destination.exists():
            found.append(f"{where}: {target!r}: no such file")
            continue
        if anchor:
            if destination.is_dir() or destination.suffix != ".md":
                found.append(f"{where}: {target!r}: an anchor into a non-Markdown target")
            elif anchor not in anchors(destination.read_text(encoding="utf-8")):
                found.append(f"{where}: {target!r}: no heading #{anchor} there")
    return found


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(path: Path) -> None:
    assert problems(path) == []


def test_the_checker_finds_broken_links(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## Its `section` — two\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[ok](other.md) [ok](other.md#its-section--two) [ok](#page) ![ok](other.md)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) [self](#nowhere)\n"
        "[web](https://example.com/x) [bad web](https://exa mple) [ftp](ftp://example.com)\n"
        "`[not a link](missing-in-code.md)`\n"
        "```\n[nor this](missing-in-fence.md)\n```\n"
        "[ref]: missing-ref.md\n"
    )
    assert [p.split(": ", 1)[1] for p in problems(page)] == [
        "'missing.md': no such file",
        "'other.md#nope': no heading #nope there",
        "'#nowhere': no heading #nowhere there",
        "'https://exa mple' is not a well-formed URL",
        "'ftp://example.com': only http(s), mailto and relative links",
        "'missing-ref.md': no such file",
    ]
