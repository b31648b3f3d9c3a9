"""What runs on the devices: the SGD steps (--parallel) and evaluation."""
