"""Imported last by the workers' fork server (the agent's preload, trainer/pod/launch.py): once its
agent is gone, the server leaves without tearing its interpreter down (trainer/pod/quick_exit.py)."""

from trainer.pod.quick_exit import leave_at_exit

leave_at_exit()
