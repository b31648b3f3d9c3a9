"""What runs inside each task. Never imports the launcher."""
