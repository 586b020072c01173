"""Corpora of the cases whose artifact is a git commit (the per-language cases).

Each case's corpus is its repository's tree at ``artifact.commit`` (the fix's parent),
unpacked to ``DEST/<owner>__<name>@<commit[:12]>/``, where `tracehound eval --corpora DEST`
finds it. The commit is read from a local mirror (``--mirrors DIR``, holding
``owner+name/repo`` bare repositories, as the tool library's fetch leaves them) or cloned from
GitHub. A second run skips what is there. Never commit corpora.

    python benchmarks/cases/fetch_git_corpus.py benchmarks/cases/cases-lang-*.jsonl \\
        ~/tracehound-corpora --mirrors /work/.mirror
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def corpus_name(repo: str, commit: str) -> str:
    return f"{repo.replace('/', '__')}@{commit[:12]}"


def _git_dir(repo: str, mirrors: Path | None, cache: Path) -> Path:
    if mirrors is not None:
        found = mirrors / repo.replace("/", "+") / "repo"
        if found.is_dir():
            return found
    bare = cache / repo.replace("/", "+")
    if not bare.is_dir():
        url = f"https://github.com/{repo}.git"
        subprocess.run(["git", "clone", "--bare", "--quiet", url, str(bare)], check=True)
    return bare


def unpack(repo: str, commit: str, dest: Path, mirrors: Path | None, cache: Path) -> Path:
    target = dest / corpus_name(repo, commit)
    if target.is_dir():
        return target
    git_dir = _git_dir(repo, mirrors, cache)
    tmp = Path(tempfile.mkdtemp(dir=dest, prefix=".unpacking-"))
    archive = subprocess.Popen(
        ["git", f"--git-dir={git_dir}", "archive", "--format=tar", commit], stdout=subprocess.PIPE
    )
    untar = subprocess.run(["tar", "-x", "-C", str(tmp)], stdin=archive.stdout, check=False)
    if archive.wait() or untar.returncode:
        # A mirror may lack its largest blobs (over 4 MiB: never indexed anyway): file by file.
        shutil.rmtree(tmp)
        tmp = Path(tempfile.mkdtemp(dir=dest, prefix=".unpacking-"))
        _files_one_by_one(git_dir, commit, tmp)
    tmp.rename(target)
    return target


def _files_one_by_one(git_dir: Path, commit: str, into: Path) -> None:
    listed = subprocess.run(
        ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "-z", commit],
        check=True, capture_output=True,
    )  # fmt: skip
    for entry in listed.stdout.split(b"\0"):
        if not entry:
            continue
        meta, _, name = entry.partition(b"\t")
        mode, kind, sha = meta.split()
        if kind != b"blob" or mode == b"120000":
            continue
        blob = subprocess.run(
            ["git", f"--git-dir={git_dir}", "cat-file", "blob", sha.decode()], capture_output=True
        )
        if blob.returncode:
            continue  # absent from the mirror
        path = into / name.decode("utf-8", "replace")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="+", type=Path)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--mirrors", type=Path, default=None)
    args = parser.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    cache = args.dest / ".git-cache"
    cache.mkdir(exist_ok=True)
    failed = 0
    for path in args.cases:
        for line in path.read_text("utf-8").splitlines():
            if not line.strip():
                continue
            case = json.loads(line)
            artifact = case.get("artifact", {})
            if artifact.get("type") != "git":
                continue
            try:
                where = unpack(artifact["repo"], artifact["commit"], args.dest, args.mirrors, cache)
                missing = [g for g in case["gold_files"] if not (where / g).is_file()]
                note = f" (gold missing: {missing})" if missing else ""
                print(f"{case['id']}: {where.name}{note}")
                failed += bool(missing)
            except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
                print(f"{case['id']}: FAILED {exc}", file=sys.stderr)
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
