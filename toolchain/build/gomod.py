"""Prints the `go mod edit` flags that let a wrapper module build another module's main package.

`go install pkg@version` refuses modules whose go.mod has `replace` directives, and a dependency's
replaces are ignored when it is built from another module. So the wrapper requires the module and
gets, from this script, the replaces that module's own build would use:

  go mod edit -json <module>.mod | python3 gomod.py [--siblings vX.Y.Z] [--staging vX.Y.Z]

- every replace that points at a published module version is mirrored as is;
- replaces that point at a local directory (a sibling module of the same repository) are dropped,
  so the module's own requirement of that sibling, a published version, applies; with --siblings,
  the wrapper requires each such sibling at that version (pulumi's sdk/v3 at pkg/v3's version);
- with --staging, each `k8s.io/* v0.0.0` requirement (a Kubernetes staging module, which
  k8s.io/kubernetes replaces with a directory of its own repository) is replaced with that
  published release.
"""
import argparse
import json
import sys


def flags(gomod, siblings=None, staging=None):
    out = []
    required = {req["Path"] for req in gomod.get("Require") or []}
    for r in gomod.get("Replace") or []:
        old, new = r["Old"], r["New"]
        if new.get("Version"):
            old_spec = old["Path"] + ("@" + old["Version"] if old.get("Version") else "")
            out.append(f"-replace={old_spec}={new['Path']}@{new['Version']}")
        elif siblings and old["Path"] in required:
            out.append(f"-require={old['Path']}@{siblings}")
    if staging:
        for req in gomod.get("Require") or []:
            if req["Path"].startswith("k8s.io/") and req["Version"] == "v0.0.0":
                out.append(f"-replace={req['Path']}={req['Path']}@{staging}")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--siblings", help="published version at which to require locally replaced modules")
    parser.add_argument("--staging", help="published version for k8s.io/* v0.0.0 requirements")
    args = parser.parse_args()
    print("\n".join(flags(json.load(sys.stdin), args.siblings, args.staging)))


if __name__ == "__main__":
    main()
