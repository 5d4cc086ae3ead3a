"""The datasets claim filled from `storage.datasets.source` (trainer/fetch.py), against a real HTTP
server and a real S3-compatible object store (versitygw) on loopback: fetched once, verified before
anything changes, unpacked safely, never losing what the claim held, one pod at a time."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import socket
import subprocess
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest
from pulumi_project import toolchain_bin_dir
from refusals import skip_if_refused_else_fail
from trainer_testing import PYTHON, clean_env, free_port, kill_tree, run_to_end
from waiting import wait_for

from trainer.fetch import FetchFailed, fetch

pytestmark = pytest.mark.timeout(120)


class Served:
    """A directory served over HTTP on loopback, counting the GETs of each path."""

    def __init__(self, root: Path):
        self.root, self.gets = root, {}
        served = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(root), **kwargs)

            def do_GET(self):
                served.gets[self.path] = served.gets.get(self.path, 0) + 1
                super().do_GET()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/{name}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def served(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    server = Served(root)
    yield server
    server.close()


def archive(path: Path, files: dict[str, bytes]) -> str:
    """A .tar.gz of `files`; returns its SHA-256."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_archive_is_fetched_verified_and_unpacked_once(served, tmp_path, monkeypatch):
    monkeypatch.setenv("POD_NAME", "trainer-0-x7k2p")  # as the fetch-data container has it
    sha = archive(served.root / "corpus.tar.gz", {"train.jsonl": b'{"text": "a"}\n', "val/val.jsonl": b'{"text": "b"}\n'})
    data = tmp_path / "data"
    data.mkdir()
    said = fetch(served.url("corpus.tar.gz"), sha, data / "corpus")
    assert said.startswith(f"[DATA] {data / 'corpus'}: fetched {served.url('corpus.tar.gz')} (") and f"sha256 {sha[:12]}" in said
    assert (data / "corpus" / "train.jsonl").read_bytes() == b'{"text": "a"}\n'
    assert (data / "corpus" / "val" / "val.jsonl").read_bytes() == b'{"text": "b"}\n'
    record = json.loads((data / ".fetched" / "corpus.json").read_text())
    # what it holds, and which pod fetched it
    assert record == {"url": served.url("corpus.tar.gz"), "sha256": sha, "bytes": (served.root / "corpus.tar.gz").stat().st_size,
                      "pod": "trainer-0-x7k2p"}  # fmt: skip
    again = fetch(served.url("corpus.tar.gz"), sha, data / "corpus")
    assert again == f"[DATA] {data / 'corpus'}: present ({served.url('corpus.tar.gz')}, sha256 {sha[:12]}), not fetched again"
    assert served.gets == {"/corpus.tar.gz": 1}
    assert sorted(p.name for p in (data / ".fetched").iterdir()) == ["corpus.json", "corpus.lock"], "no download or partial left"


def test_a_download_that_differs_from_its_sha256_changes_nothing_on_the_claim(served, tmp_path):
    sha = archive(served.root / "v1.tar.gz", {"train.jsonl": b"v1\n"})
    data = tmp_path / "data"
    data.mkdir()
    fetch(served.url("v1.tar.gz"), sha, data / "corpus")
    archive(served.root / "v2.tar.gz", {"train.jsonl": b"v2\n"})
    with pytest.raises(FetchFailed) as failed:
        fetch(served.url("v2.tar.gz"), "0" * 64, data / "corpus")
    got = hashlib.sha256((served.root / "v2.tar.gz").read_bytes()).hexdigest()
    assert str(failed.value).startswith(f"storage.datasets.source {served.url('v2.tar.gz')}: its sha256 is {got}, not {'0' * 64}")
    assert str(failed.value).endswith("nothing on the claim was changed")
    assert (data / "corpus" / "train.jsonl").read_bytes() == b"v1\n"
    assert sorted(p.name for p in (data / ".fetched").iterdir()) == ["corpus.json", "corpus.lock"]


def test_a_new_source_replaces_the_old_data_which_is_kept_aside_as_is_data_the_user_put_there(served, tmp_path):
    data = tmp_path / "data"
    (data / "corpus").mkdir(parents=True)
    (data / "corpus" / "mine.txt").write_text("the user's own")
    sha = archive(served.root / "corpus.tar.gz", {"train.jsonl": b"v1\n"})
    fetch(served.url("corpus.tar.gz"), sha, data / "corpus")
    (aside,) = (data / ".fetched").glob("corpus.replaced-*")
    assert (aside / "mine.txt").read_text() == "the user's own"
    new_sha = archive(served.root / "corpus.tar.gz", {"train.jsonl": b"v2\n"})
    fetch(served.url("corpus.tar.gz"), new_sha, data / "corpus")
    assert (data / "corpus" / "train.jsonl").read_bytes() == b"v2\n"
    kept = sorted((data / ".fetched").glob("corpus.replaced-*"))
    assert {(p / "train.jsonl").read_bytes() for p in kept if (p / "train.jsonl").exists()} == {b"v1\n"}, kept


def test_a_plain_file_and_a_zip_land_in_their_directory(served, tmp_path):
    (served.root / "labels.csv").write_bytes(b"id,label\n1,cat\n")
    with zipfile.ZipFile(served.root / "images.zip", "w") as zipped:
        zipped.writestr("a/1.txt", "one")
    data = tmp_path / "data"
    data.mkdir()
    fetch(served.url("labels.csv"), hashlib.sha256(b"id,label\n1,cat\n").hexdigest(), data / "labels")
    assert (data / "labels" / "labels.csv").read_bytes() == b"id,label\n1,cat\n"
    fetch(served.url("images.zip"), hashlib.sha256((served.root / "images.zip").read_bytes()).hexdigest(), data / "images")
    assert (data / "images" / "a" / "1.txt").read_text() == "one"


def test_an_unreachable_source_and_a_missing_file_fail_with_the_reason(served, tmp_path):
    port = free_port()  # nothing listens there
    with pytest.raises(FetchFailed, match=r"cannot fetch it \(.*Connection refused.*; 3 of 3 tries\)"):
        fetch(f"http://127.0.0.1:{port}/corpus.tar.gz", "0" * 64, tmp_path / "corpus", wait_s=0)
    with pytest.raises(FetchFailed, match=r"cannot fetch it \(HTTP 404 File not found; 1 of 3 tries\)"):  # a 404 is not tried again
        fetch(served.url("missing.tar.gz"), "0" * 64, tmp_path / "corpus", wait_s=0)
    assert not (tmp_path / "corpus").exists()


def test_an_archive_reaching_outside_its_directory_fails_the_container_and_places_nothing(served, tmp_path):
    sha = archive(served.root / "evil.tar.gz", {"../escaped.txt": b"x"})
    with tarfile.open(served.root / "link.tar", "w") as tar:  # a link out, then a file written through it
        link = tarfile.TarInfo("out")
        link.type, link.linkname = tarfile.SYMTYPE, str(tmp_path)
        tar.addfile(link)
        through = tarfile.TarInfo("out/escaped.txt")
        through.size = 1
        tar.addfile(through, io.BytesIO(b"x"))
    data = tmp_path / "data"
    data.mkdir()
    for name, checksum in (("evil.tar.gz", sha), ("link.tar", hashlib.sha256((served.root / "link.tar").read_bytes()).hexdigest())):
        command = [PYTHON, "-m", "trainer.fetch", "--url", served.url(name), "--sha256", checksum, "--into", str(data / "evil")]
        code, text = run_to_end(command, clean_env(), tmp_path / "evil.log", timeout=60)
        assert code == 1 and text.splitlines()[-1].startswith("[DATA] ") and "is outside the destination" in text, text
        assert not (data / "evil").exists() and not (tmp_path / "escaped.txt").exists() and not (data / "escaped.txt").exists()
        assert sorted(p.name for p in (data / ".fetched").iterdir()) == ["evil.lock"]


def test_pods_that_start_together_fetch_once(served, tmp_path):
    sha = archive(served.root / "corpus.tar.gz", {"train.jsonl": b"x" * (1 << 20)})
    data = tmp_path / "data"
    data.mkdir()
    command = [PYTHON, "-m", "trainer.fetch", "--url", served.url("corpus.tar.gz"), "--sha256", sha, "--into", str(data / "corpus")]
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(run_to_end(command, clean_env(), tmp_path / f"pod-{i}.log", timeout=60)))
               for i in range(3)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [code for code, _ in results] == [0, 0, 0], results
    said = sorted(text.strip().split(": ", 1)[1].split(" (")[0] for _, text in results)
    assert said == [f"fetched {served.url('corpus.tar.gz')}", "present", "present"], said
    assert served.gets == {"/corpus.tar.gz": 1}


# --- an object store prefix -----------------------------------------------------------------------
ACCESS, SECRET = "fetch-test-access", "fetch-test-secret-key"


class ObjectStore:
    """versitygw's posix backend on loopback: `root`'s subdirectories are buckets, their files objects."""

    def __init__(self, root: Path, port: int):
        self.root, self.endpoint = root, f"http://127.0.0.1:{port}"

    def put(self, bucket: str, files: dict[str, bytes]) -> None:
        for name, data in files.items():
            (self.root / bucket / name).parent.mkdir(parents=True, exist_ok=True)
            (self.root / bucket / name).write_bytes(data)


@pytest.fixture
def object_store(tmp_path):
    bin_dir = toolchain_bin_dir()
    binary = bin_dir / "versitygw"
    if not binary.exists():
        skip_if_refused_else_fail("versitygw", bin_dir, f"{binary} is not built")
    root, port = tmp_path / "buckets", free_port()
    root.mkdir()
    command = [binary, "--access", ACCESS, "--secret", SECRET, "--port", f"127.0.0.1:{port}", "posix", str(root)]
    with open(tmp_path / "versitygw.log", "wb") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() is None, 30, "versitygw to listen",
                 interval=0.2, gone=lambda: None if server.poll() is None else f"versitygw exited ({server.poll()})",
                 not_yet=(OSError,))  # fmt: skip
        yield ObjectStore(root, port)
    finally:
        kill_tree(server.pid)
        server.wait(10)


def credentials(monkeypatch, secret: str = SECRET) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_REGION", "us-east-1")


def test_an_object_store_prefix_is_fetched_whole_and_verified_by_its_tree_digest(object_store, tmp_path, monkeypatch):
    corpus = {"train.jsonl": b'{"text": "a"}\n', "val/val.jsonl": b'{"text": "b"}\n', "shards/00001.bin": bytes(range(256)) * 64}
    object_store.put("corpora", {f"web/v1/{name}": data for name, data in corpus.items()})
    object_store.put("corpora", {"web/v10/other.jsonl": b"not under web/v1/", "web/v1.txt": b"nor this"})
    uploaded = tmp_path / "uploaded"  # the copy one uploaded, and digests with the command the docs give
    for name, data in corpus.items():
        (uploaded / name).parent.mkdir(parents=True, exist_ok=True)
        (uploaded / name).write_bytes(data)
    code, digest = run_to_end([PYTHON, "-m", "trainer.fetch", "--digest", str(uploaded)], clean_env(), tmp_path / "digest.log", timeout=60)
    assert code == 0, digest
    digest = digest.strip()
    listed = "".join(f"{name}\0{hashlib.sha256(corpus[name]).hexdigest()}\n" for name in sorted(corpus))
    assert digest == hashlib.sha256(listed.encode()).hexdigest(), "each file's path and SHA-256, sorted by path, hashed"
    credentials(monkeypatch)
    data = tmp_path / "data"
    data.mkdir()
    said = fetch("s3://corpora/web/v1", digest, data / "corpus", endpoint=object_store.endpoint)
    assert said.startswith("[DATA] ") and "fetched s3://corpora/web/v1 (" in said, said
    got = {p.relative_to(data / "corpus").as_posix(): p.read_bytes() for p in (data / "corpus").rglob("*") if p.is_file()}
    assert got == corpus
    assert "not fetched again" in fetch("s3://corpora/web/v1/", digest, data / "corpus", endpoint=object_store.endpoint)

    # a prefix whose objects changed: the digest differs, nothing on the claim changes
    object_store.put("corpora", {"web/v2/train.jsonl": b"changed\n"})
    with pytest.raises(FetchFailed, match=rf"its tree digest is [0-9a-f]{{64}}, not {'1' * 64} as the stack says \(1 files, 8 bytes"):
        fetch("s3://corpora/web/v2/", "1" * 64, data / "corpus", endpoint=object_store.endpoint)
    assert {p.relative_to(data / "corpus").as_posix(): p.read_bytes() for p in (data / "corpus").rglob("*") if p.is_file()} == corpus


def test_a_wrong_secret_an_empty_prefix_and_a_store_that_does_not_answer_fail_with_the_stores_reason(object_store, tmp_path, monkeypatch):
    object_store.put("corpora", {"web/v1/train.jsonl": b"x\n"})
    credentials(monkeypatch, secret="not-the-secret")
    with pytest.raises(FetchFailed, match=r"s3://corpora/web/v1/: cannot fetch it \(SignatureDoesNotMatch: "):
        fetch("s3://corpora/web/v1/", "0" * 64, tmp_path / "corpus", endpoint=object_store.endpoint, tries=1)
    credentials(monkeypatch)
    with pytest.raises(FetchFailed, match=r"cannot fetch it \(no object under the prefix web/v9/\)"):
        fetch("s3://corpora/web/v9/", "0" * 64, tmp_path / "corpus", endpoint=object_store.endpoint, tries=1)
    with pytest.raises(FetchFailed, match=r"cannot fetch it \(NoSuchBucket: "):
        fetch("s3://no-such-bucket/web/", "0" * 64, tmp_path / "corpus", endpoint=object_store.endpoint, tries=1)
    with pytest.raises(FetchFailed, match=r"cannot fetch it \(Could not connect to the endpoint URL"):
        fetch("s3://corpora/web/v1/", "0" * 64, tmp_path / "corpus", endpoint=f"http://127.0.0.1:{free_port()}", tries=1)
    assert not (tmp_path / "corpus").exists() and sorted(p.name for p in (tmp_path / ".fetched").iterdir()) == ["corpus.lock"]
