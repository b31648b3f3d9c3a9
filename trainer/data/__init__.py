"""Input: the pipeline contract, shard arithmetic, DALI, the built-in pipelines, where DALI runs."""
