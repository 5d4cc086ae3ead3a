"""The local cluster's add-ons, each a binary of the toolchain run as a process: the JobSet and Kueue
controllers (controller_addon.py, jobset.py, kueue.py) and Volcano's scheduler (volcano.py). Their
CRDs and webhooks also serve the test API server's journeys (tests/infra)."""
