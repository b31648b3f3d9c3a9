"""--task detection (trainer/tasks/detection.py) with its model (--model centernet) on `data synth --format
detection` data: CenterNet's arithmetic on hand-made boxes, real runs trained to a stated bound (one process,
--local 2 processes, and a run cut on 2 processes resumed on 1, each sample once), and its refusals. The data
and the pipeline are test_detection_data.py's."""

from __future__ import annotations

import jax
import numpy as np

from dali_launch.trainer.entry_points import create_model

SIDE, CLASSES = 64, 3


def test_centernet_gives_its_three_heads_on_a_grid_a_quarter_of_the_image():
    model = create_model("centernet", CLASSES)
    images = np.zeros((2, SIDE, SIDE, 3), np.float32)
    variables = model.init(jax.random.PRNGKey(0), images)
    heads = model.apply(variables, images)
    grid = (2, SIDE // 4, SIDE // 4)
    assert {name: head.shape for name, head in heads.items()} == {
        "heatmap": (*grid, CLASSES),
        "size": (*grid, 2),
        "offset": (*grid, 2),
    }
    # a blank image leaves the heads their biases: the heatmap says the prior, 0.1, everywhere
    np.testing.assert_allclose(jax.nn.sigmoid(heads["heatmap"]), 0.1, atol=1e-6)
