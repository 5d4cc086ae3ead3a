"""Checkpoints: the store of a run's checkpoints, the sharded writer, and durable writes."""
