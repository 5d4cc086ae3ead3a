"""Fills the datasets claim from the stack's `storage.datasets.source`, before the world trains:
`python -m trainer.fetch --url URL --sha256 HEX --into /data/NAME [--endpoint URL]`, each pod's
`fetch-data` init container.

The source is an http(s) URL of an archive or a file, or an object store prefix, `s3://BUCKET/PREFIX/`
(trainer/object_store.py), whose objects land in NAME at their paths below the prefix. Its SHA-256
is the file's, or a prefix's tree digest: `python -m trainer.fetch --digest DIR` prints it for the
directory one uploaded (each file's path and SHA-256, sorted by path, hashed).

Fetched once: `/data/.fetched/NAME.json` records what NAME holds (its URL and SHA-256) and which
pod fetched it (POD_NAME); a pod that finds it there, for the same SHA-256, fetches nothing. One
pod fetches at a time (an flock on the claim); the others wait, then find the record. A download
is verified before anything on the claim changes: a SHA-256 that differs, or a source that cannot
be reached after a few tries, fails the container with the reason as its last line (the pod's
status shows it). An archive (.tar, .tar.gz, .tgz, .tar.bz2, .tar.xz, .zip) is unpacked beside
NAME and renamed into place; a file is copied into NAME. What NAME held before is never deleted: it is moved to `/data/.fetched/NAME.replaced-<time>`.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import socket
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from trainer import contract as c, object_store
from trainer.checkpoint.durable import fsync_directory, write_text_atomically

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar", ".zip")
RECORDS = ".fetched"
TRIES = 3
TIMEOUT_S = 60
CHUNK = 1 << 20


class FetchFailed(RuntimeError):
    pass


def fetch(url: str, sha256: str, into: Path, endpoint: str | None = None, tries: int = TRIES, wait_s: float = 2.0) -> str:
    """Makes `into` hold what `url` serves, once; returns what was done, as a line for the log."""
    records = into.parent / RECORDS
    records.mkdir(exist_ok=True)
    record = records / f"{into.name}.json"
    with open(records / f"{into.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the kernel drops it if this process dies
        if _recorded_sha256(record) == sha256 and into.exists():
            return f"[DATA] {into}: present ({url}, sha256 {sha256[:12]}), not fetched again"
        started = time.monotonic()
        staged = records / f"{into.name}.partial"
        shutil.rmtree(staged, ignore_errors=True)
        try:
            if url.startswith(object_store.SCHEME):
                size = _download_prefix(url, staged, sha256, endpoint, tries)
            else:
                size = _download_and_unpack(url, records / f"{into.name}.download", staged, sha256, tries, wait_s)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        if into.exists() or into.is_symlink():
            into.rename(_aside(records, into.name))
        os.rename(staged, into)
        fetched = {"url": url, "sha256": sha256, "bytes": size, "pod": os.environ.get(c.POD_NAME.name) or socket.gethostname()}
        write_text_atomically(record, json.dumps(fetched) + "\n", records / f"{into.name}.json.partial")
        fsync_directory(records)
        fsync_directory(into.parent)
        return f"[DATA] {into}: fetched {url} ({size} bytes, sha256 {sha256[:12]}) in {time.monotonic() - started:.1f}s"


def _download_and_unpack(url: str, download: Path, staged: Path, sha256: str, tries: int, wait_s: float) -> int:
    size = _download(url, download, sha256, tries, wait_s)
    try:
        _unpack(url, download, staged)
    finally:
        download.unlink(missing_ok=True)
    return size


def _download_prefix(url: str, staged: Path, sha256: str, endpoint: str | None, tries: int) -> int:
    try:
        files, size = object_store.download_prefix(url, staged, endpoint, tries)
    except object_store.ObjectStoreError as error:
        raise FetchFailed(f"storage.datasets.source {url}: cannot fetch it ({error})") from None
    if (digest := tree_digest(staged)) != sha256:
        raise FetchFailed(
            f"storage.datasets.source {url}: its tree digest is {digest}, not {sha256} as the stack says "
            f"({files} files, {size} bytes; `python -m trainer.fetch --digest DIR` gives a directory's); nothing on the claim was changed"
        )
    return size


def tree_digest(root: Path) -> str:
    """SHA-256 of a directory's files: each one's path below `root` and SHA-256, sorted by path."""
    lines = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        with open(path, "rb") as opened:
            lines.append(f"{path.relative_to(root).as_posix()}\0{hashlib.file_digest(opened, 'sha256').hexdigest()}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _aside(records: Path, name: str) -> Path:
    """A name under the records that nothing has yet, for what `name` held before."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    candidates = (records / f"{name}.replaced-{stamp}{f'-{n}' if n else ''}" for n in range(1000))
    return next(path for path in candidates if not path.exists())


def _recorded_sha256(record: Path) -> str | None:
    try:
        return json.loads(record.read_text()).get("sha256")
    except (OSError, ValueError):
        return None


def _download(url: str, to: Path, sha256: str, tries: int, wait_s: float) -> int:
    for attempt in range(1, tries + 1):
        digest, size = hashlib.sha256(), 0
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer, open(to, "wb") as out:
                while chunk := answer.read(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
            break
        except OSError as exc:  # urllib's URLError and HTTPError among them
            reason = f"HTTP {exc.code} {exc.reason}" if isinstance(exc, urllib.error.HTTPError) else getattr(exc, "reason", exc)
            if isinstance(exc, urllib.error.HTTPError) and exc.code < 500 or attempt == tries:
                to.unlink(missing_ok=True)
                raise FetchFailed(f"storage.datasets.source {url}: cannot fetch it ({reason}; {attempt} of {tries} tries)") from None
            time.sleep(wait_s * attempt)
    if digest.hexdigest() != sha256:
        to.unlink()
        raise FetchFailed(
            f"storage.datasets.source {url}: its sha256 is {digest.hexdigest()}, not {sha256} as the stack says "
            f"({size} bytes); nothing on the claim was changed"
        )
    return size


def data_members(archive: tarfile.TarFile, staged: Path):
    """The archive's members as tarfile's "data" filter passes them (which the image's Python, 3.11.2,
    lacks): files, directories and links inside `staged` only, no device, no setuid or setgid bit."""
    root = staged.resolve()
    for member in archive:
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise tarfile.TarError(f"{member.name!r} is a device or a pipe, which a dataset holds none of")
        target = (root / member.name).resolve()
        if member.issym():
            target = (target.parent / member.linkname).resolve()
        elif member.islnk():
            target = (root / member.linkname).resolve()
        if Path(member.name).is_absolute() or not target.is_relative_to(root):
            raise tarfile.TarError(f"{member.name!r} is outside the destination")
        member.mode &= 0o755  # no setuid, setgid or sticky bit, nothing writable by others
        yield member


def file_name(url: str) -> str:
    """The last segment of the URL's path: what a file is saved as, and an archive's name."""
    return url.split("?", 1)[0].split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1]


def _unpack(url: str, archive: Path, staged: Path) -> None:
    name = file_name(url)
    staged.mkdir()
    if name.endswith(".zip"):
        with zipfile.ZipFile(archive) as opened:
            opened.extractall(staged)  # zipfile keeps every member inside `staged`
    elif name.endswith(ARCHIVE_SUFFIXES):
        with tarfile.open(archive) as opened:
            opened.extractall(staged, members=data_members(opened, staged))
    else:
        shutil.copyfile(archive, staged / (name or "data"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.fetch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--digest", type=Path, metavar="DIR", help="print DIR's tree digest, the sha256 of a prefix holding it, and stop")
    parser.add_argument("--url")
    parser.add_argument("--sha256")
    parser.add_argument("--into", type=Path, help="the directory the data lands in, /data/NAME")
    parser.add_argument("--endpoint", help="an S3-compatible service's URL, for an s3:// source (unset: AWS's)")
    args = parser.parse_args(argv)
    if args.digest:
        print(tree_digest(args.digest))
        return 0
    if not (args.url and args.sha256 and args.into):
        parser.error("--url, --sha256 and --into are required (or --digest DIR)")
    try:
        print(fetch(args.url, args.sha256, args.into, args.endpoint), flush=True)
    except (FetchFailed, tarfile.TarError, zipfile.BadZipFile) as exc:
        print(f"[DATA] {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
