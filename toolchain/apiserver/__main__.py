"""`python -m toolchain.apiserver --selftest`: start the test API server, use it, stop it."""

import sys

from .server import main

sys.exit(main())
