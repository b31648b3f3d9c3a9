"""A model twice an H200's memory with AdamW, for benchmarks/gpu.sh's refusal: the example's MLP
with two hidden layers of 131,072 (17.3 G parameters, 64 GiB in fp32; with AdamW's two moments and the
gradients 258 GiB against one H200's 141)."""

import flax.linen as nn


class HugeMLP(nn.Module):
    num_classes: int = 10
    width: int = 131_072

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = x.reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(self.width)(x))
        x = nn.relu(nn.Dense(self.width)(x))
        return nn.Dense(self.num_classes)(x)


def huge_mlp(num_classes: int = 10):
    return HugeMLP(num_classes=num_classes)
