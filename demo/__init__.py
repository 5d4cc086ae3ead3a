"""The demo: the dev stack trained on the local cluster by the real `pulumi up`, in one command.

- `cluster`: the local cluster the demo runs on, started or reused, with the trainer image in it.
- `stack`: the demo's own copy of the project and its stack, on a file backend under the cache,
  with a generated passphrase beside it (no account, prompt or change to a tracked file).
- `outputs`: where the run's outputs lie on this machine.
- `__main__`: `python -m demo up | resize N | status | down` (the Makefile's demo targets).
"""
