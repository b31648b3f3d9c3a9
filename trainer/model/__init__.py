"""The models: built-in Flax modules and the model contract."""
