"""Watching a deployed world from outside, on any cluster, with kubectl alone (no Pulumi, no torch):

- `kubectl`: one namespace's kubectl, its answers as JSON or text.
- `world_state`: the world's pods, the workload's end and why anything waits, read in one look.
- `rank0_log`: the newest checkpoint rank 0's log names, and when; its lines are read with trainer/lines.py.
- `progress`: rank 0's `[TRAIN]` lines drawn as a progress bar per epoch, with an ETA.
- `follow`: a world followed until it ends (the demo's screen).
- `status`: where a run stands, in one view (`python -m observe.status`, printed by the stack's
  `statusCommand` output).
"""
