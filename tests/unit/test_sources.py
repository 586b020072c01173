"""Unit tests of reading a repository from disk: .gitignore, skips, decoding, confinement."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shared.index.reindex import NOT_SOURCE, IndexReport
from shared.index.sources import Skipped, SourceFile, read_source, walk


def write(root: Path, rel: str, data: str | bytes = "x = 1\n") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    write(root, ".gitignore", "# build output\n*.log\nbuild/\n!keep.log\n")
    write(root, "app.py")
    write(root, "debug.log", "noise")
    write(root, "keep.log", "wanted")
    write(root, "build/out.py")
    write(root, "pkg/.gitignore", "secret.py\n/generated/\n")
    write(root, "pkg/mod.py")
    write(root, "pkg/secret.py")
    write(root, "pkg/generated/gen.py")
    write(root, "pkg/sub/secret.py")
    write(root, "pkg/sub/trace.log", "noise")
    write(root, "pkg/sub/build/b.py")
    write(root, "pkg/sub/generated/kept.py")
    write(root, "secret.py")  # the nested .gitignore does not apply above its directory
    write(root, ".git/config", "[core]")
    write(root, "node_modules/left-pad/index.js", "module.exports = 1")
    write(root, "web/node_modules/x/index.js", "module.exports = 1")
    os.symlink("..", root / "pkg" / "loop")
    os.symlink("app.py", root / "alias.py")
    return root


def test_walk_honours_gitignore_files_at_every_level(repo: Path) -> None:
    assert sorted(walk(repo)) == [
        ".gitignore",
        "app.py",
        "keep.log",
        "pkg/.gitignore",
        "pkg/mod.py",
        "pkg/sub/generated/kept.py",
        "secret.py",
    ]


def test_negated_pattern_keeps_a_file_an_earlier_pattern_ignored(repo: Path) -> None:
    paths = set(walk(repo))
    assert "keep.log" in paths
    assert "debug.log" not in paths


def test_nested_gitignore_applies_below_its_directory_only(repo: Path) -> None:
    paths = set(walk(repo))
    assert "pkg/secret.py" not in paths
    assert "pkg/sub/secret.py" not in paths
    assert "secret.py" in paths


def test_vcs_and_dependency_directories_are_never_walked(repo: Path) -> None:
    paths = list(walk(repo))
    assert not any(p.startswith(".git/") or "node_modules/" in p for p in paths)


def test_symlink_loop_is_not_followed_and_does_not_hang(repo: Path) -> None:
    paths = list(walk(repo))  # a followed loop would recurse until the path is too long
    assert not any(p.startswith("pkg/loop") for p in paths)
    assert "alias.py" not in paths  # file links are not followed either


def test_walk_yields_repo_relative_paths_of_real_files(repo: Path) -> None:
    for p in walk(repo):
        assert not p.startswith("/") and "\\" not in p
        assert (repo / p).is_file()


def test_leading_slash_in_the_root_gitignore_anchors_the_pattern(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "/generated/\n/config.py\n")
    write(tmp_path, "generated/a.py")
    write(tmp_path, "config.py")
    write(tmp_path, "src/generated/b.py")
    write(tmp_path, "src/config.py")
    assert sorted(walk(tmp_path)) == [".gitignore", "src/config.py", "src/generated/b.py"]


# ----------------------------------------------------------------------- read_source


def test_file_is_read_as_text_with_a_hash_of_its_bytes(tmp_path: Path) -> None:
    write(tmp_path, "app.py", "print('hi')\n")
    got = read_source(tmp_path, "app.py", max_bytes=1000)
    assert isinstance(got, SourceFile)
    assert got.text == "print('hi')\n"
    other = read_source(tmp_path, "app.py", max_bytes=1000)
    assert isinstance(other, SourceFile) and other.sha256 == got.sha256
    write(tmp_path, "app.py", "print('bye')\n")
    changed = read_source(tmp_path, "app.py", max_bytes=1000)
    assert isinstance(changed, SourceFile) and changed.sha256 != got.sha256


def test_file_with_nul_bytes_is_skipped_as_binary(tmp_path: Path) -> None:
    write(tmp_path, "weird.py", b"import os\x00\x01\x02")
    assert read_source(tmp_path, "weird.py", max_bytes=1000) == Skipped("weird.py", "binary")


def test_oversize_file_is_skipped(tmp_path: Path) -> None:
    write(tmp_path, "big.py", "x" * 5000)
    got = read_source(tmp_path, "big.py", max_bytes=1000)
    assert isinstance(got, Skipped)
    assert got.reason.startswith("oversize")


def test_file_of_exactly_max_bytes_is_read(tmp_path: Path) -> None:
    write(tmp_path, "edge.py", "x" * 1000)
    assert isinstance(read_source(tmp_path, "edge.py", max_bytes=1000), SourceFile)


def test_invalid_utf8_is_decoded_with_replacement_characters(tmp_path: Path) -> None:
    write(tmp_path, "legacy.py", b'name = "caf\xe9"\nprint(name)\n')
    got = read_source(tmp_path, "legacy.py", max_bytes=1000)
    assert isinstance(got, SourceFile)
    assert got.text == 'name = "caf\ufffd"\nprint(name)\n'


def test_path_escaping_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    write(root, "app.py")
    write(tmp_path, "outside.py", "SECRET = 1\n")
    got = read_source(root, "../outside.py", max_bytes=1000)
    assert isinstance(got, Skipped)
    assert "outside" in got.reason


def test_symlink_pointing_outside_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    write(tmp_path, "outside.py", "SECRET = 1\n")
    root.mkdir()
    os.symlink(tmp_path / "outside.py", root / "link.py")
    got = read_source(root, "link.py", max_bytes=1000)
    assert isinstance(got, Skipped)
    assert "outside" in got.reason


def test_missing_file_is_skipped_as_unreadable(tmp_path: Path) -> None:
    got = read_source(tmp_path, "gone.py", max_bytes=1000)
    assert isinstance(got, Skipped)
    assert got.reason.startswith("unreadable")


def test_the_index_report_names_skipped_sources_and_counts_the_rest() -> None:
    report = IndexReport("shop")
    assert report.skipped_summary() == "none"
    report.skipped += [Skipped("logo.png", NOT_SOURCE), Skipped("a.bin", "binary (NUL byte)")]
    assert report.skipped_summary() == "a.bin (binary (NUL byte)), 1 file that is not source"
    report.skipped.append(Skipped("b.png", NOT_SOURCE))
    assert report.skipped_summary().endswith(", 2 files that are not source")
