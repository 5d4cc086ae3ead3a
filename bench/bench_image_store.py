"""What a trainer image costs the local cluster: its archive, the containerd store it makes, and the
time `ctr images import` takes (a measurement, not a test).

Each archive is imported, in turn, into a throwaway containerd of its own (Debian's, the cluster's
overlayfs snapshotter, CRI off), as the cluster's store imports it; the store's size is what `du`
counts under its root; the containerd is then stopped by its id and its store removed.
Usage: .venv/bin/python bench/bench_image_store.py BEFORE.tar [AFTER.tar]
       (AFTER: the current trainer archive, `toolchain/images.sh --print`)
Needs root, containerd and ctr, and free disk for the largest store (about 2.25 x its archive).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from report import print_table  # bench/report.py: the scripts run with bench/ on sys.path

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("DDP_INFRA_CACHE", Path.home() / ".cache" / "ddp-infra"))


def current_trainer_tar() -> Path:
    lines = subprocess.run(["bash", str(REPO / "toolchain" / "images.sh"), "--print"],
                           check=True, capture_output=True, text=True).stdout.splitlines()  # fmt: skip
    return Path(next(line.split()[2] for line in lines if line.startswith("trainer ")))


def disk_usage(path: Path) -> int:
    return int(subprocess.run(["du", "-sb", str(path)], check=True, capture_output=True, text=True).stdout.split()[0])


def import_into_fresh_store(tar: Path) -> tuple[float, int]:
    """(seconds to import, bytes of the store) for one archive."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-store-", dir=CACHE) as work:
        root, socket = Path(work, "root"), Path(work, "containerd.sock")
        config = Path(work, "containerd.toml")
        config.write_text(f'version = 2\nroot = "{root}"\nstate = "{work}/state"\n'
                          f'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n[grpc]\n  address = "{socket}"\n')  # fmt: skip
        daemon = subprocess.Popen(["containerd", "--config", str(config)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        ctr = ["ctr", "--address", str(socket), "-n", "k8s.io"]
        try:
            deadline = time.monotonic() + 30
            while subprocess.run([*ctr, "version"], capture_output=True).returncode != 0:
                if time.monotonic() > deadline or daemon.poll() is not None:
                    raise SystemExit(f"containerd did not start (config {config})")
                time.sleep(0.2)
            began = time.monotonic()
            subprocess.run([*ctr, "images", "import", str(tar)], check=True, capture_output=True, timeout=1800)
            seconds = time.monotonic() - began
            return seconds, disk_usage(root)
        finally:
            os.killpg(daemon.pid, signal.SIGTERM)
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path, nargs="?")
    args = parser.parse_args()
    after = args.after or current_trainer_tar()
    for tool in ("containerd", "ctr", "du"):
        if not shutil.which(tool):
            raise SystemExit(f"needs {tool}")
    figures = {}
    for name, tar in (("before", args.before), ("after", after)):
        seconds, store = import_into_fresh_store(tar)
        figures[name] = (tar.stat().st_size, store, seconds)
        print(f"{name}: {tar.name}: archive {tar.stat().st_size / 2**30:.2f} GiB, store {store / 2**30:.2f} GiB, "
              f"import {seconds:.1f} s", flush=True)  # fmt: skip
    (a_before, s_before, t_before), (a_after, s_after, t_after) = figures["before"], figures["after"]
    print_table("after vs before (ratio)", [
        ("archive", f"{a_after / a_before:.3f}"),
        ("store", f"{s_after / s_before:.3f}"),
        ("import time", f"{t_after / t_before:.3f}"),
    ])  # fmt: skip


if __name__ == "__main__":
    main()
