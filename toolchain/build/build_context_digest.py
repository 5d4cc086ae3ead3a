"""Prints what the trainer image's key covers of a build context (toolchain/images.sh hashes it).

    python3 toolchain/build/build_context_digest.py DIR

One line per file that `buildah bud DIR` sends after .containerignore or .dockerignore, with
Docker's pattern rules (`**`, `!` exceptions, a match on a parent directory excludes what is under
it): path, executable bit, sha256. The ignore file and the Dockerfile themselves come first, sent
or not, since the build reads them either way.
"""

import hashlib
import os
import re
import sys


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pattern_regex(pattern):
    """Docker's ignore pattern as a regular expression over a slash-separated relative path."""
    out, i = "", 0
    while i < len(pattern):
        ch = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                out, i = out + "(?:.*/)?", i + 1
            else:
                out += ".*"
            continue
        if ch == "*":
            out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out += re.escape(ch)
            else:
                body = pattern[i + 1:end].replace("\\", "\\\\")
                out += "[" + ("^" + body[1:] if body[:1] in "^!" and body else body) + "]"
                i = end
        elif ch == "\\" and i + 1 < len(pattern):
            i += 1
            out += re.escape(pattern[i])
        else:
            out += re.escape(ch)
        i += 1
    return re.compile(out)


def ignore_rules(path):
    """(negate, regex) for each pattern of the ignore file, in order: the last match decides."""
    rules = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
            rules.append((negate, pattern_regex(pattern)))
    return rules


def ignored(rel, rules):
    parts = rel.split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    result = False
    for negate, rx in rules:
        if any(rx.fullmatch(c) for c in candidates):
            result = not negate
    return result


def digest_lines(top):
    ignore_file = next((n for n in (".containerignore", ".dockerignore") if os.path.isfile(os.path.join(top, n))), None)
    for name in (ignore_file, "Dockerfile"):
        if name:
            yield " ".join(("build-file", name, sha(os.path.join(top, name))))
    rules = ignore_rules(os.path.join(top, ignore_file)) if ignore_file else []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, top).replace(os.sep, "/")
            if ignored(rel, rules):
                continue
            if os.path.islink(path):
                yield " ".join(("link", rel, os.readlink(path)))
            elif os.path.isfile(path):
                yield " ".join(("file", rel, str(int(os.access(path, os.X_OK))), sha(path)))


if __name__ == "__main__":
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        raise SystemExit("usage: build_context_digest.py DIR (a build context)")
    for line in digest_lines(sys.argv[1]):
        print(line)
