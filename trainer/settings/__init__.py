"""The training config by concern: each module one frozen dataclass of fields, `TrainConfig` (trainer/config.py)
combining them. Light: the launcher builds its flags from them at start."""
