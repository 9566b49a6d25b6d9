"""The documentation's own rules: a README that fits on a screen or three,
no references that mean nothing outside the lab (the old task file,
studies named by number, tracker issue numbers), and every page of docs/
in the site's nav (`mkdocs build --strict` builds a page left out of the
nav without failing, and nobody finds it). Runs without root."""

import os
import re
import subprocess

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_MAX_LINES = 150

# Built from pieces so that this file does not match itself.
FORBIDDEN = {
    "the old task file": re.compile("MIS" + r"SION\.md", re.IGNORECASE),
    "a study named by number": re.compile(r"\bseeds?[ _-]?" + "0{2}" + r"\d", re.IGNORECASE),
    "an issue number": re.compile(r"\bissues?" + r"[ #-]*\d+", re.IGNORECASE),
}


def repository_files(root: str) -> list[str]:
    """Every file of the work tree that git tracks or would track (ignored
    files left out), relative to root; without git, every file but .git."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
        return sorted({p for p in out.decode().split("\0") if p and os.path.isfile(os.path.join(root, p))})
    except (OSError, subprocess.CalledProcessError):
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d != ".git"]
            found += [os.path.relpath(os.path.join(dirpath, f), root) for f in filenames]
        return sorted(found)


def text_of(path: str) -> str | None:
    """A file's text, or None for a binary file (a NUL byte, or not UTF-8)."""
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def forbidden_mentions(root: str, files: list[str]) -> list[str]:
    """'path:line: what (the match)' for every forbidden reference."""
    found = []
    for rel in files:
        text = text_of(os.path.join(root, rel))
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for what, pattern in FORBIDDEN.items():
                m = pattern.search(line)
                if m:
                    found.append(f"{rel}:{number}: {what} ({m.group(0)!r})")
    return found


class _NavLoader(yaml.SafeLoader):
    """A safe loader that reads tags it does not know (mkdocs.yml may hold
    `!!python/name:` or `!ENV` values) as plain values instead of refusing."""


_NavLoader.add_multi_constructor("", lambda loader, suffix, node: None)
_NavLoader.add_multi_constructor("!", lambda loader, suffix, node: None)
_NavLoader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def nav_pages(nav) -> list[str]:
    """The Markdown files a nav names, relative to docs_dir, in order
    (entries that are links to other sites left out)."""
    found: list[str] = []
    if isinstance(nav, str):
        if "://" not in nav:
            found.append(nav)
    elif isinstance(nav, list):
        for item in nav:
            found += nav_pages(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            found += nav_pages(value)
    return found


def nav_problems(root: str) -> list[str]:
    """'orphan: PATH' for a Markdown file under docs_dir no nav entry names,
    'missing: PATH' for a nav entry naming no file; empty when they agree."""
    with open(os.path.join(root, "mkdocs.yml"), encoding="utf-8") as f:
        config = yaml.load(f, Loader=_NavLoader) or {}
    docs = os.path.join(root, config.get("docs_dir") or "docs")
    named = {os.path.normpath(p) for p in nav_pages(config.get("nav") or [])}
    present = set()
    for dirpath, _, filenames in os.walk(docs):
        present |= {os.path.normpath(os.path.relpath(os.path.join(dirpath, n), docs))
                    for n in filenames if n.endswith(".md")}
    return ([f"orphan: {p}" for p in sorted(present - named)] +
            [f"missing: {p}" for p in sorted(named - present)])


def line_count(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        return len(f.read().splitlines())


def test_readme_is_at_most_150_lines():
    n = line_count(os.path.join(REPO, "README.md"))
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES}): move detail into docs/"


def test_no_file_mentions_the_task_file_numbered_studies_or_issue_numbers():
    found = forbidden_mentions(REPO, repository_files(REPO))
    assert not found, "references that mean nothing outside the lab:\n" + "\n".join(found)


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_exists():
    problems = nav_problems(REPO)
    assert not problems, "docs/ and mkdocs.yml's nav disagree:\n" + "\n".join(problems)


# The checks can fail: each rule against files made to break it.

# (Adjacent literals, so that this file does not match itself.)
@pytest.mark.parametrize("line", [
    "see MIS" "SION.md section 4", "the mis" "sion.md file",
    "the spoofing study (seed 0" "00)", "Seeds 0" "00 and 001 rerun here", "charts/seed0" "04_over_time.png",
    "wan=rate, issue" " 16", "Issue" " 16's benchmark", "(the issue" "-20 findings)", "fixed in issue" " #15",
])
def test_each_forbidden_reference_is_caught(tmp_path, line):
    (tmp_path / "notes.md").write_text(f"fine\n{line}\n")
    (tmp_path / "blob.bin").write_bytes(b"\0" + line.encode())      # binary files are not read
    assert forbidden_mentions(str(tmp_path), ["notes.md", "blob.bin"]) == \
        [f"notes.md:2: {w} ({m.group(0)!r})" for w, p in FORBIDDEN.items() for m in [p.search(line)] if m]


@pytest.mark.parametrize("line", [
    "the random seed 7", "seed: 1", "testbed_seed", "an issue with the tool", "ISSUE: none", "issues arise",
])
def test_ordinary_words_pass(tmp_path, line):
    (tmp_path / "notes.md").write_text(line + "\n")
    assert forbidden_mentions(str(tmp_path), ["notes.md"]) == []


def test_a_long_readme_is_caught(tmp_path):
    (tmp_path / "README.md").write_text("line\n" * (README_MAX_LINES + 1))
    assert line_count(str(tmp_path / "README.md")) > README_MAX_LINES
    (tmp_path / "README.md").write_text("line\n" * README_MAX_LINES)
    assert line_count(str(tmp_path / "README.md")) == README_MAX_LINES


def test_an_orphan_page_and_a_missing_nav_entry_are_caught(tmp_path):
    (tmp_path / "docs" / "guide").mkdir(parents=True)
    for page in ("index.md", "guide/a.md", "guide/orphan.md"):
        (tmp_path / "docs" / page).write_text("# page\n")
    (tmp_path / "docs" / "guide" / "chart.png").write_bytes(b"\x89PNG")     # not a page
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\nmarkdown_extensions:\n  - x:\n      y: !!python/name:os.path.join\n"
        "nav:\n  - Home: index.md\n  - Guide:\n      - A: guide/a.md\n      - Gone: guide/gone.md\n"
        "  - Elsewhere: https://example.org/page.md\n")
    assert nav_problems(str(tmp_path)) == ["orphan: guide/orphan.md", "missing: guide/gone.md"]
    (tmp_path / "docs" / "guide" / "orphan.md").unlink()
    (tmp_path / "docs" / "guide" / "gone.md").write_text("# page\n")
    assert nav_problems(str(tmp_path)) == []


def test_this_file_does_not_match_itself():
    assert forbidden_mentions(REPO, ["tests/test_docs.py"]) == []
