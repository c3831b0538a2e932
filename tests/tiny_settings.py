"""Task settings small enough for tests. A module of its own (conftest.py re-exports them) so
that processes which import a test module by name, such as Dask workers unpickling a task
class defined in tests/test_dask.py, find these by a name no other folder has: "conftest"
is also the repository root's doctest configuration."""

TINY_SIGNAL = {"n_layers": 2, "seq_len": 8, "n_examples": 20, "batch_size": 8, "hidden": 3}
# a fresh head per run, as every digits-lenet run was before `head_start` existed
TINY_DIGITS = {"per_digit": 2, "batch_size": 8, "pretrain_epochs": 2, "lr": 1e-3, "head_start": "random"}
