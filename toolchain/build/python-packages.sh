#!/bin/sh
# The Python language host's python for one question. At every command (preview, up, destroy,
# refresh) the host asks the project's virtualenv which packages it holds, to find the Pulumi ones'
# plugins: `python -m pip list -v --format json`, of which it reads each package's name, version and
# location. Importing pip for it takes 0.6 s of CPU. The wrapper (language-host-wrapper.sh) has the
# host ask this script instead (PULUMI_PYTHON_CMD, which that host uses for that question alone),
# which answers it with python-packages.py beside it, and runs anything else with the virtualenv's
# python (PULUMI_PACKAGES_PYTHON).
if [ "$*" = "-m pip list -v --format json" ]; then
  exec "$PULUMI_PACKAGES_PYTHON" "$(dirname "$0")/python-packages.py"
fi
exec "$PULUMI_PACKAGES_PYTHON" "$@"
