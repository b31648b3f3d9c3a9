"""Train a Flax model defined in this very file, then the built-in MLP, from Python: docs/python-api.md.

python docs/python_api_example.py      # the embedded MNIST digits, one epoch each, on this machine
"""

import flax.linen as nn

import dali_launch as dl


class SmallNet(nn.Module):
    """A model of our own. It lives in __main__ (as a notebook's would), so it is sent to the run by value."""

    num_classes: int = 10

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(128)(x))
        return nn.Dense(self.num_classes)(x)


executor = dl.Executor("here")  # one process on this machine, as `dali-launch train`
executor.update(epochs=1, run_root="runs")  # any setting of the CLI, by its field name

job = executor.submit(model=SmallNet)  # checked, written (it prints job.run_dir), started: returns at once
result = job.result(timeout_s=900)  # waits; raises RunFailed with the run's own reason if it failed
print(f"own model: test accuracy {result['final']['test_accuracy']:.4f}")

mlp = executor.submit(model=dl.models["mlp"])  # a built-in: recorded as `--model mlp` would be
print(f"MLP: test accuracy {mlp.result(timeout_s=900)['final']['test_accuracy']:.4f}")
print("MLP loss by epoch:", [round(row["train_loss"], 4) for row in mlp.metrics()])
