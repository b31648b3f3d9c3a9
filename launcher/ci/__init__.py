"""Cluster CI: the test suite and a short training job on a real SLURM queue, as JUnit XML."""
