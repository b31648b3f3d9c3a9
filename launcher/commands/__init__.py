"""The command groups of `dali-launch`, one module each; cli.py wires them."""
