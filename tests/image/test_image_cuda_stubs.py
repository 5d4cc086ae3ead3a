"""toolchain/cuda_stubs.py on a site-packages built here with gcc: a package whose library needs a
versioned library under nvidia/ (as torch's need libcudart.so.13), and a library under nvidia/
that nothing needs (as cuDNN's engines, loaded only on a GPU). The stubs are loaded by the real
dynamic linker, through the library that needs them."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CUDA_STUBS = REPO / "toolchain" / "cuda_stubs.py"
pytestmark = pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("readelf")), reason="needs gcc and readelf")


def shared_library(path: Path, source: str, *link: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    c_file = path.with_suffix(".c")
    c_file.write_text(source)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(path), str(c_file), *link], check=True)
    c_file.unlink()


@pytest.fixture
def site_packages(tmp_path):
    """nvidia/fake/lib/libfakert.so.7 (version node libfakert.so.7: a function and a 24-byte table),
    nvidia/fake/lib/libengine.so.7 (needed by nothing), headers, a license, pip's metadata, and
    user/libuser.so, which needs libfakert through an $ORIGIN rpath as torch/lib does."""
    lib = tmp_path / "nvidia" / "fake" / "lib"
    version_script = tmp_path / "fakert.map"
    version_script.write_text("libfakert.so.7 { global: fakeGetDeviceCount; fakeTable; local: *; };\n")
    shared_library(lib / "libfakert.so.7",
                   "int fakeGetDeviceCount(int *n) { *n = 8; return 0; }\nlong fakeTable[3] = {1, 2, 3};\n",
                   "-Wl,-soname,libfakert.so.7", f"-Wl,--version-script,{version_script}")  # fmt: skip
    shared_library(lib / "libengine.so.7", "int engineRun(void) { return 0; }\n")
    (tmp_path / "nvidia" / "fake" / "include").mkdir()
    (tmp_path / "nvidia" / "fake" / "include" / "fake.h").write_text("int fakeGetDeviceCount(int *);\n")
    (tmp_path / "nvidia" / "fake" / "LICENSE.txt").write_text("the vendor's license\n")
    metadata = tmp_path / "nvidia_fake-7.0.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text("Name: nvidia-fake\nVersion: 7.0\n")
    shared_library(tmp_path / "user" / "libuser.so",
                   "int fakeGetDeviceCount(int *);\nint devices(void) { int n = -1; return fakeGetDeviceCount(&n) ? -100 : n; }\n",
                   f"-L{lib}", "-l:libfakert.so.7", "-Wl,-rpath,$ORIGIN/../nvidia/fake/lib")  # fmt: skip
    version_script.unlink()
    return tmp_path


def slim(site_packages: Path) -> str:
    result = subprocess.run([sys.executable, str(CUDA_STUBS), str(site_packages)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def readelf(*args: str) -> str:
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True, text=True).stdout


def devices_seen_by_user(site_packages: Path) -> int:
    """What the needing library's call returns, in a fresh process (the linker's cache is per process)."""
    code = f"import ctypes; print(ctypes.CDLL({str(site_packages / 'user' / 'libuser.so')!r}).devices())"
    return int(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)


def test_a_needed_library_becomes_a_stub_with_its_soname_version_and_symbols(site_packages):
    real = site_packages / "nvidia" / "fake" / "lib" / "libfakert.so.7"
    assert devices_seen_by_user(site_packages) == 8
    real_size = real.stat().st_size

    output = slim(site_packages)

    assert "stubbed nvidia/fake/lib/libfakert.so.7" in output
    assert "Library soname: [libfakert.so.7]" in readelf("-d", str(real))
    symbols = readelf("--dyn-syms", str(real))
    assert re.search(r"FUNC\s+GLOBAL\s+DEFAULT\s+\d+\s+fakeGetDeviceCount@@libfakert\.so\.7", symbols), symbols
    assert re.search(r"\s24\s+OBJECT\s+GLOBAL\s+DEFAULT\s+\d+\s+fakeTable@@libfakert\.so\.7", symbols), symbols
    assert "NEEDED" not in readelf("-d", str(real))
    # Loaded by the linker through the needing library's versioned reference: every call answers
    # 100, cudaErrorNoDevice, and writes nothing.
    assert devices_seen_by_user(site_packages) == -100
    assert ctypes.CDLL(str(real)).fakeGetDeviceCount(None) == 100
    assert real.stat().st_size < real_size * 2 and real.stat().st_size < 64 * 1024


def test_what_nothing_needs_is_removed_and_pips_metadata_and_licenses_stay(site_packages):
    output = slim(site_packages)

    nvidia = site_packages / "nvidia"
    assert sorted(str(p.relative_to(nvidia)) for p in nvidia.rglob("*") if p.is_file()) == [
        "fake/LICENSE.txt", "fake/lib/libfakert.so.7",
    ]  # fmt: skip
    assert not (nvidia / "fake" / "include").exists()
    assert (site_packages / "nvidia_fake-7.0.dist-info" / "METADATA").is_file()
    assert "removed 2 files" in output


def test_a_library_with_thread_local_data_is_refused_by_name_and_nothing_changes(site_packages):
    shared_library(site_packages / "nvidia" / "fake" / "lib" / "libtls.so.1", "__thread int perThread;\n")
    shared_library(site_packages / "user" / "libtlsuser.so", "extern __thread int perThread;\nint get(void) { return perThread; }\n",
                   f"-L{site_packages / 'nvidia' / 'fake' / 'lib'}", "-l:libtls.so.1")  # fmt: skip

    result = subprocess.run([sys.executable, str(CUDA_STUBS), str(site_packages)], capture_output=True, text=True, timeout=60)

    assert result.returncode != 0
    assert "libtls.so.1 exports perThread as TLS" in result.stdout + result.stderr
    assert devices_seen_by_user(site_packages) == 8
    assert (site_packages / "nvidia" / "fake" / "lib" / "libengine.so.7").is_file()
