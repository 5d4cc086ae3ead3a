"""Shrinks the local stand-in base: PyPI's torch wheel brings about 3 GB of NVIDIA libraries that a
CPU-only pod never calls, but the dynamic linker must still find some of them for `import torch`.

    python3 toolchain/cuda_stubs.py SITE_PACKAGES

Every ELF file outside `nvidia/` is read for the libraries it needs (DT_NEEDED). Each of those that
lives under `nvidia/*/lib` is replaced by a stub built here: the same soname, the same version
node, every function the real library exports, each returning 100 (cudaErrorNoDevice: torch reads
it as "no GPU", the state a CPU node is in; the other CUDA libraries read any nonzero value as a
failure), and its data as zeroes of the same size. Every other file under `nvidia/` (the libraries
loaded only on a GPU, the headers and tools) is removed, the packages' Python files, licenses and
metadata kept, so pip still sees the pins installed and `pip install -r requirements.txt` installs
nothing.

Needs readelf and gcc (binutils). Prints what it stubbed and removed, and the bytes freed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

NO_DEVICE = 100
STUB = "ddp_infra_cuda_stub"
# One line of `readelf --dyn-syms -W`: Num, Value, Size, Type, Bind, Vis, Ndx, Name[@[@]VERSION].
SYMBOL = re.compile(r"^\s*\d+:\s+\S+\s+(\d+)\s+(\w+)\s+(\w+)\s+\w+\s+(\w+)\s+([^@\s]+)(?:(@@?)(\S+))?")
NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[(.+)\]")
SONAME = re.compile(r"\(SONAME\)\s+Library soname: \[(.+)\]")


def readelf(*args: str) -> str:
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True, text=True).stdout


def is_elf(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def needed_by(path: Path) -> set[str]:
    return set(NEEDED.findall(readelf("-d", str(path))))


def exported_symbols(library: Path) -> list[tuple[str, str, int, str | None]]:
    """(name, FUNC or OBJECT, size, default version or None) of each symbol the library defines
    for others."""
    symbols = []
    for line in readelf("--dyn-syms", str(library)).splitlines():
        match = SYMBOL.match(line)
        if not match:
            continue
        size, kind, bind, section, name, at, version = match.groups()
        if section in ("UND", "ABS") or bind == "LOCAL":
            continue
        if kind == "NOTYPE":
            kind = "FUNC"
        if kind not in ("FUNC", "OBJECT"):
            raise SystemExit(f"[cuda-stubs] {library.name} exports {name} as {kind}: only functions and data can be stubbed")
        if at == "@":
            raise SystemExit(f"[cuda-stubs] {library.name} exports {name}@{version}, a non-default version")
        symbols.append((name, kind, int(size), version))
    versions = sorted({version for *_, version in symbols if version})
    if len(versions) > 1:
        raise SystemExit(f"[cuda-stubs] {library.name} has version nodes {versions}: one at most")
    return symbols


def build_stub(library: Path, symbols: list[tuple[str, str, int, str | None]], into: Path) -> None:
    sonames = SONAME.findall(readelf("-d", str(library)))
    soname = sonames[0] if sonames else library.name
    node = next((version for *_, version in symbols if version), "")
    lines = ["\t.text", "\t.p2align 4", f"\t.type {STUB}, @function", f"{STUB}:",
             f"\tmovl ${NO_DEVICE}, %eax", "\tret"]
    for name, kind, size, _ in symbols:
        if kind == "FUNC":
            lines += [f"\t.globl {name}", f"\t.type {name}, @function", f"\t.set {name}, {STUB}"]
        else:  # zeroed data of the real size (typeinfo names and the like, never read on a CPU)
            lines += ["\t.data", f"\t.globl {name}", f"\t.type {name}, @object", f"\t.size {name}, {size}",
                      f"{name}:", f"\t.zero {max(size, 1)}", "\t.text"]
    lines.append('\t.section .note.GNU-stack,"",@progbits')
    with tempfile.TemporaryDirectory() as work:
        source, script = Path(work, "stub.s"), Path(work, "stub.map")
        source.write_text("\n".join(lines) + "\n")
        script.write_text(f"{node} {{ global: *; local: {STUB}; }};\n")
        subprocess.run(["gcc", "-shared", "-nostdlib", "-o", str(into), str(source),
                        f"-Wl,-soname,{soname}", f"-Wl,--version-script,{script}"], check=True)


def size_of(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink())


def slim(site_packages: Path) -> None:
    nvidia = site_packages / "nvidia"
    elf_outside = [p for p in site_packages.rglob("*") if nvidia not in p.parents and is_elf(p)]
    needed = set().union(*(needed_by(p) for p in elf_outside))
    libraries = {p.name: p for p in nvidia.glob("*/lib/*") if is_elf(p)}
    stubbed = sorted(needed & libraries.keys())
    before = size_of(nvidia)
    # Every library read before any is replaced: one that cannot be stubbed changes nothing.
    symbols = {name: exported_symbols(libraries[name]) for name in stubbed}
    for name in stubbed:
        real = libraries[name]
        stub = real.with_name(real.name + ".stub")
        build_stub(real, symbols[name], stub)
        os.replace(stub, real)
        print(f"[cuda-stubs] stubbed {real.relative_to(site_packages)}")
    kept = {libraries[name] for name in stubbed}
    removed = 0
    for path in sorted(nvidia.rglob("*"), reverse=True):
        if path in kept or path.suffix == ".py" or path.name.startswith("LICENSE"):
            continue
        if path.is_dir():
            if not any(path.iterdir()):
                path.rmdir()
        else:
            removed += 1
            path.unlink()
    print(f"[cuda-stubs] removed {removed} files; nvidia/ went from {before >> 10} KiB to {size_of(nvidia) >> 10} KiB")


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1], "nvidia").is_dir():
        raise SystemExit("usage: cuda_stubs.py SITE_PACKAGES (a directory with an nvidia/ package)")
    slim(Path(sys.argv[1]))
