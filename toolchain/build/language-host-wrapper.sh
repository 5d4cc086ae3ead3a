#!/bin/sh
# Runs the Python language host built from an sdk/v3 older than the pin (toolchain/build.sh) with
# the project's virtualenv. That host reads it only from its -virtualenv flag, which newer CLIs no
# longer pass: they send runtime options inside each request, which it ignores, and would run the
# program with the machine's python3. The CLI starts the host in the project's directory, so the
# virtualenv is the one its Pulumi.yaml names (runtime.options.virtualenv).
host="$(dirname "$(readlink -f "$0")")/@HOST@"
for project in Pulumi.yaml Pulumi.yml; do
  [ -f "$project" ] || continue
  venv=$(sed -n 's/^[[:space:]]*virtualenv:[[:space:]]*["'\'']\{0,1\}\([^"'\'' #]*\).*/\1/p' "$project" | head -n 1)
  if [ -n "$venv" ]; then exec "$host" -virtualenv "$venv" "$@"; fi
done
exec "$host" "$@"
