#!/bin/sh
# Runs the Python language host built from an sdk/v3 older than the pin (toolchain/build.sh) with
# the project's virtualenv. That host reads it only from its -virtualenv flag, which newer CLIs no
# longer pass: they send runtime options inside each request, which it ignores, and would run the
# program with the machine's python3. The CLI starts the host in the project's directory, so the
# virtualenv is the one its Pulumi.yaml names (runtime.options.virtualenv).
here="$(dirname "$(readlink -f "$0")")"
host="$here/@HOST@"
for project in Pulumi.yaml Pulumi.yml; do
  [ -f "$project" ] || continue
  venv=$(sed -n 's/^[[:space:]]*virtualenv:[[:space:]]*["'\'']\{0,1\}\([^"'\'' #]*\).*/\1/p' "$project" | head -n 1)
  [ -n "$venv" ] || continue
  # The host asks "$venv/bin/$PULUMI_PYTHON_CMD" for the virtualenv's packages (python-packages.sh).
  # It joins the two as paths, and a path climbs no higher than /: enough ../ reach python-packages
  # from any virtualenv. A PULUMI_PYTHON_CMD of the user's own is kept.
  if [ -z "${PULUMI_PYTHON_CMD:-}" ] && [ -x "$here/python-packages" ]; then
    case "$venv" in /*) PULUMI_PACKAGES_PYTHON="$venv/bin/python" ;; *) PULUMI_PACKAGES_PYTHON="$PWD/$venv/bin/python" ;; esac
    PULUMI_PYTHON_CMD="$(printf '../%.0s' $(seq 64))${here#/}/python-packages"
    export PULUMI_PACKAGES_PYTHON PULUMI_PYTHON_CMD
  fi
  exec "$host" -virtualenv "$venv" "$@"
done
exec "$host" "$@"
