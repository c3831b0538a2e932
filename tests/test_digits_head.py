"""digits-lenet: where the retrained head starts (`head_start`, `head_noise`) and the cache
key of the pretrained network (its code path)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mianalysis.dumps import DumpError  # noqa: E402
from mianalysis.sampling import ParameterSampler  # noqa: E402
from mianalysis.tasks import DigitsLeNetTask, get_task  # noqa: E402

# Few pretraining epochs keep the tests fast; 5 already classify far above chance.
SMALL = {"per_digit": 3, "batch_size": 10, "pretrain_epochs": 5}


def _head(task):
    """The pretrained last layer as one flat vector, in the dump's parameter order."""
    _, head = task.pretrained()
    return torch.cat([head.weight.detach().reshape(-1), head.bias.detach()]).numpy()


def _pretrained_accuracy(task):
    """Test accuracy of the pretrained network, computed here from its modules."""
    body, head = task.pretrained()
    _, _, xte, yte = task.dataset()
    with torch.no_grad():
        return float((head(body(torch.from_numpy(xte).unsqueeze(1))).argmax(1).numpy() == yte).mean())


def test_paper_preset_starts_from_the_pretrained_head():
    assert get_task("digits-lenet", "paper").settings["head_start"] == "pretrained"
    assert get_task("digits-lenet", "long").settings["head_start"] == "random"


def test_fixed_pretrained_start_is_the_pretrained_head_in_every_run_and_client():
    task = DigitsLeNetTask(**SMALL, head_start="pretrained")
    result = ParameterSampler(task, seed=2, init="fixed", progress=False).train_chunk(range(4))
    start = result.samples[:, 0]  # (clients, runs, params)
    assert start.shape == (3, 4, 850)
    assert np.array_equal(start, np.broadcast_to(_head(task).astype(np.float32), start.shape))
    # training moved it (4 Adam steps of lr 1e-5: each parameter by at most ~4e-5)
    moved = np.abs(result.samples[:, -1] - start).max()
    assert 0 < moved < 1e-4


def test_accuracy_at_the_pretrained_start_is_the_pretrained_networks():
    task = DigitsLeNetTask(**SMALL)
    expected = _pretrained_accuracy(task)
    assert expected > 0.5  # far above chance (0.1)
    result = ParameterSampler(task, init="fixed", progress=False).train_chunk(range(2))
    accuracy = result.metrics[:, task.metric_names.index("accuracy"), 0]  # (clients, runs) at checkpoint 0
    np.testing.assert_allclose(accuracy, expected, atol=1e-6)


def test_per_run_perturbation_has_the_stated_sd_and_is_shared_by_a_runs_clients():
    sd = 0.05
    task = DigitsLeNetTask(**SMALL, head_noise=sd)
    result = ParameterSampler(task, seed=5, progress=False).train_chunk(range(20))
    start = result.samples[:, 0].astype(np.float64)  # (clients, runs, params)
    assert np.array_equal(start[0], start[1]) and np.array_equal(start[0], start[2])
    noise = start[0] - _head(task)  # 20 runs x 850 = 17,000 draws
    # The sample sd of 17,000 normal draws has a relative standard error of 1/sqrt(2 x 17,000)
    # = 0.54 %: 3 % is over 5 standard errors, and an sd off by a factor 1.1 is 18 away.
    assert abs(noise.std() / sd - 1) < 0.03
    assert abs(noise.mean()) < 5 * sd / np.sqrt(noise.size)
    # runs draw independently: the correlation of two runs' perturbations is ~N(0, 1/850)
    assert abs(np.corrcoef(noise[0], noise[1])[0, 1]) < 5 / np.sqrt(850)


def test_no_head_noise_makes_per_run_the_fixed_start():
    task = DigitsLeNetTask(**SMALL, head_noise=0)
    per_run = ParameterSampler(task, seed=1, progress=False).train_chunk(range(3)).samples
    fixed = ParameterSampler(task, seed=1, init="fixed", progress=False).train_chunk(range(3)).samples
    assert np.array_equal(per_run, fixed)


def test_per_run_start_does_not_depend_on_the_shared_streams():
    """Two cells of one seed, with and without the augmentation shared, start each run from
    the same point (so their estimates are not independent samples of each other's), and
    train apart from there."""
    task = DigitsLeNetTask(**SMALL, head_noise=0.01)
    apart = ParameterSampler(task, seed=3, progress=False).train_chunk(range(3)).samples
    shared = ParameterSampler(task, seed=3, progress=False, shared=("augmentation",)).train_chunk(range(3)).samples
    assert np.array_equal(apart[:, 0], shared[:, 0])
    assert not np.array_equal(apart[:, 0, 0], apart[:, 0, 1])  # one start per run
    assert not np.array_equal(apart[:, -1], shared[:, -1])


@pytest.mark.parametrize("init", ["per-run", "fixed"])
def test_pretrained_start_does_not_depend_on_the_chunk(init):
    task = DigitsLeNetTask(**SMALL)
    sampler = ParameterSampler(task, seed=4, init=init, progress=False, shared=("augmentation",))
    whole = sampler.train_chunk(range(5))
    parts = [sampler.train_chunk(runs) for runs in ([0], [1, 2], [3, 4])]
    assert np.array_equal(whole.samples, np.concatenate([p.samples for p in parts], axis=2))
    assert np.array_equal(whole.metrics, np.concatenate([p.metrics for p in parts], axis=3))


def test_random_start_draws_a_fresh_head():
    task = DigitsLeNetTask(**SMALL, head_start="random")
    fixed = ParameterSampler(task, init="fixed", progress=False).train_chunk(range(2)).samples[:, 0]
    assert np.array_equal(fixed[:, 0], fixed[:, 1])  # one head for all runs ...
    head = _head(task)
    assert np.abs(fixed[0, 0] - head).max() > 0.1  # ... that is not the pretrained one
    assert np.all(fixed[0, 0, -10:] == 0)  # biases start at 0
    np.testing.assert_allclose(fixed[0, 0, :-10].std(), 1 / np.sqrt(84), rtol=0.1)  # weights N(0, 1/84)
    per_run = ParameterSampler(task, progress=False).train_chunk(range(2)).samples[:, 0]
    assert not np.array_equal(per_run[:, 0], per_run[:, 1])


def test_a_dump_from_another_head_start_is_refused_on_resume(tmp_path):
    ParameterSampler(DigitsLeNetTask(**SMALL, head_start="random"), chunk_size=2, progress=False).sample(2, tmp_path / "d")
    with pytest.raises((ValueError, DumpError), match="head_start"):
        ParameterSampler(DigitsLeNetTask(**SMALL), chunk_size=2, progress=False).sample(4, tmp_path / "d")


@pytest.mark.parametrize("value, error, message", [
    (-0.1, ValueError, r"`head_noise` \(task digits-lenet\) must be a finite number in \[0, 10\]; got -0.1"),
    (float("nan"), ValueError, r"`head_noise` \(task digits-lenet\) must be a finite number in \[0, 10\]"),
    ("0.01", TypeError, r"`head_noise` \(task digits-lenet\) must be a finite number in \[0, 10\]; got '0.01'"),
])
def test_bad_head_noise(value, error, message):
    with pytest.raises(error, match=message):
        DigitsLeNetTask(head_noise=value)


def test_bad_head_start():
    with pytest.raises(ValueError, match=r"`head_start` \(task digits-lenet\) must be one of \['pretrained', "
                                         r"'random'\]; got 'fixed'"):
        DigitsLeNetTask(head_start="fixed")


# ---------------------------------------------------------------- the pretraining cache key
def test_pretrain_key_follows_the_code_path(monkeypatch):
    monkeypatch.delenv("MKL_CBWR", raising=False)
    task = DigitsLeNetTask(**SMALL)
    base = task._pretrain_key()
    # the same for the same pretraining, whatever the settings that do not enter it
    assert DigitsLeNetTask(**SMALL, lr=1e-3, head_noise=0.2, head_start="random")._pretrain_key() == base
    assert DigitsLeNetTask(**{**SMALL, "pretrain_epochs": 6})._pretrain_key() != base
    changed = {}
    with monkeypatch.context() as m:
        m.setenv("MKL_CBWR", "COMPATIBLE")
        changed["mkl"] = task._pretrain_key()
    with monkeypatch.context() as m:
        m.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "NO AVX")
        changed["capability"] = task._pretrain_key()
    with monkeypatch.context() as m:
        m.setattr(torch, "__version__", "0.0.1+other")
        changed["torch"] = task._pretrain_key()
    assert base not in changed.values() and len(set(changed.values())) == 3, changed
    assert task._pretrain_key() == base  # and back once the code path is this one again


def test_pretrained_networks_of_two_code_paths_are_cached_apart(monkeypatch, tmp_path):
    monkeypatch.setenv("MIANALYSIS_CACHE", str(tmp_path))
    monkeypatch.delenv("MKL_CBWR", raising=False)
    DigitsLeNetTask(**SMALL).pretrained()
    DigitsLeNetTask(**SMALL).pretrained()  # found in the cache
    assert len(list(tmp_path.glob("lenet-8-*.pt"))) == 1
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    DigitsLeNetTask(**SMALL).pretrained()
    assert len(list(tmp_path.glob("lenet-8-*.pt"))) == 2
