"""Surviving the cluster: checkpoints, preemption and stop signals, the watchdog, how a rank ends."""
