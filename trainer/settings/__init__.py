"""A run's settings by concern, one frozen dataclass a module, nested into the task spec (trainer/config.py).
Light: the launcher builds its flags from them at start."""
