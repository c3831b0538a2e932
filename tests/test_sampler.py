import json
import os
import sys

import numpy as np
import pytest
from conftest import TINY_DIGITS, TINY_SIGNAL
from interrupt import kill_at_random_moments

torch = pytest.importorskip("torch")

from mianalysis.dumps import DumpError, ParameterDump  # noqa: E402
from mianalysis.sampling import ParameterSampler  # noqa: E402
from mianalysis.tasks import DigitsLeNetTask, SignalRNNTask, get_task  # noqa: E402
from mianalysis.tasks.base import ReplicaGenerators  # noqa: E402
from mianalysis.tasks.signal import elman_recurrence  # noqa: E402


@pytest.mark.parametrize("task", [SignalRNNTask(**TINY_SIGNAL), DigitsLeNetTask(**TINY_DIGITS)], ids=["signal", "digits"])
def test_vectorised_equals_one_run_at_a_time(task):
    sampler = ParameterSampler(task, seed=3, progress=False)
    batched = sampler.train_chunk(range(5))
    loop = sampler.train_chunk(range(5), vectorised=False)
    np.testing.assert_allclose(batched.samples, loop.samples, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batched.metrics, loop.metrics, rtol=1e-5, atol=1e-6)
    # and training moved the parameters
    assert np.abs(batched.samples[:, -1] - batched.samples[:, 0]).max() > 0


def test_elman_recurrence_equals_torch_rnn_and_its_gradient():
    # torch.nn.RNN with an identity input matrix and no biases computes the same recurrence,
    # one replica at a time: an independent implementation of the forward and its gradients.
    g = torch.Generator().manual_seed(0)
    drive = torch.randn(6, 2, 3, 4, dtype=torch.float64, generator=g, requires_grad=True)
    w = (0.5 * torch.randn(2, 4, 4, dtype=torch.float64, generator=g)).requires_grad_(True)
    weights = torch.randn(6, 2, 3, 4, dtype=torch.float64, generator=g)
    ours = elman_recurrence(drive, w)
    ours_grads = torch.autograd.grad((ours * weights).sum(), (drive, w))
    for r in range(2):
        rnn = torch.nn.RNN(4, 4, bias=False, dtype=torch.float64)
        with torch.no_grad():
            rnn.weight_ih_l0.copy_(torch.eye(4))
            rnn.weight_hh_l0.copy_(w[r])
        theirs, _ = rnn(drive[:, r])  # (T, B, H)
        torch.testing.assert_close(ours[:, r], theirs, rtol=1e-12, atol=1e-12)
        grad_drive, grad_w = torch.autograd.grad((theirs * weights[:, r]).sum(), (drive, rnn.weight_hh_l0))
        torch.testing.assert_close(ours_grads[0][:, r], grad_drive[:, r], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(ours_grads[1][r], grad_w, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(elman_recurrence, (drive, w))


def test_parameter_counts():
    assert SignalRNNTask().parameter_shapes()[-1] == ("head.bias", (2,))
    count = lambda t: sum(int(np.prod(s)) for _, s in t.parameter_shapes())  # noqa: E731
    assert count(SignalRNNTask()) == 358
    assert count(SignalRNNTask(n_layers=11)) == 394
    assert count(DigitsLeNetTask()) == 850


def test_signal_examples_follow_shift_and_scale():
    inputs, targets = SignalRNNTask().client_examples(0)
    np.testing.assert_allclose(inputs.mean(axis=1), targets[:, 0], atol=1e-5)
    np.testing.assert_allclose(inputs.std(axis=1), targets[:, 1], rtol=1e-4)
    other, _ = SignalRNNTask().client_examples(1)
    assert not np.allclose(inputs, other)


def test_checkpoints_and_init_modes():
    task = SignalRNNTask(**TINY_SIGNAL)  # 20 examples, batch 8: 3 iterations
    assert ParameterSampler(task, every=2).checkpoints == [0, 2, 3]
    assert ParameterSampler(task, every=1).checkpoints == [0, 1, 2, 3]
    per_run = ParameterSampler(task, seed=1, progress=False).train_chunk(range(3)).samples
    assert np.array_equal(per_run[0, 0], per_run[2, 0])  # clients of a run share the start
    assert not np.array_equal(per_run[0, 0, 0], per_run[0, 0, 1])  # runs do not
    assert not np.array_equal(per_run[0, -1], per_run[1, -1])  # clients train differently
    fixed = ParameterSampler(task, seed=1, init="fixed", progress=False).train_chunk(range(3)).samples
    assert np.array_equal(fixed[0, 0, 0], fixed[1, 0, 2])


def test_same_seed_same_samples_and_chunking_does_not_matter():
    task = SignalRNNTask(**TINY_SIGNAL)
    a = ParameterSampler(task, seed=5, progress=False).train_chunk(range(6)).samples
    b = ParameterSampler(task, seed=5, progress=False).train_chunk(range(6)).samples
    np.testing.assert_array_equal(a, b)
    split = np.concatenate([ParameterSampler(task, seed=5, progress=False).train_chunk(r).samples
                            for r in (range(0, 2), range(2, 6))], axis=2)
    np.testing.assert_allclose(a, split, rtol=1e-6, atol=1e-7)
    c = ParameterSampler(task, seed=6, progress=False).train_chunk(range(6)).samples
    assert not np.allclose(a[:, -1], c[:, -1])


def test_sample_writes_dump_and_resumes(tmp_path):
    task = SignalRNNTask(**TINY_SIGNAL)
    full = ParameterSampler(task, seed=2, chunk_size=3, progress=False).sample(7, tmp_path / "full")
    assert full.complete and full.n_runs == 7 and full.metric_names == ["loss"]
    assert full.meta["task"] == "signal-rnn" and full.meta["seed"] == 2
    # An interrupted sampling: only the first chunk written.
    part = ParameterSampler(task, seed=2, chunk_size=3, progress=False)
    result = part.train_chunk(range(0, 3))
    dump = ParameterDump.create(tmp_path / "part", clients=full.clients, checkpoints=full.checkpoints, n_runs=7,
                                layout=full.layout, metric_names=full.metric_names, meta=full.meta)
    dump.write_chunk(0, 3, {c: result.samples[i] for i, c in enumerate(dump.clients)},
                     {c: result.metrics[i] for i, c in enumerate(dump.clients)})
    resumed = part.sample(7, tmp_path / "part")
    for name in ("client_0.f32", "client_2.f32", "metrics_1.f32"):
        assert (tmp_path / "full" / name).read_bytes() == (tmp_path / "part" / name).read_bytes()
    assert resumed.verify() == 7


def test_other_settings_in_same_folder_is_an_error(tmp_path):
    task = SignalRNNTask(**TINY_SIGNAL)
    ParameterSampler(task, seed=2, progress=False).sample(2, tmp_path / "d")
    before = {p.name: p.read_bytes() for p in (tmp_path / "d").iterdir()}
    with pytest.raises(DumpError, match=r"holds a dump with other settings .*'seed': \(2, 3\)"):
        ParameterSampler(task, seed=3, progress=False).sample(2, tmp_path / "d")
    assert before == {p.name: p.read_bytes() for p in (tmp_path / "d").iterdir()}


def test_unknown_task_setting_and_preset():
    with pytest.raises(ValueError, match=r"unknown setting\(s\) \['layers'\] for task 'signal-rnn'"):
        SignalRNNTask(layers=3)
    with pytest.raises(ValueError, match="`preset` must be one of"):
        get_task("signal-rnn", preset="huge")
    with pytest.raises(ValueError, match="`task` must be one of"):
        get_task("cifar")
    with pytest.raises(ValueError, match="`init` must be one of 'per-run', 'fixed'"):
        ParameterSampler(SignalRNNTask(), init="random")


def test_digits_augmentation_without_ranges_is_identity():
    task = DigitsLeNetTask(max_rotation=0.0, max_zoom=0.0, max_shift=0.0)
    images = task.dataset()[0][:5]
    out = task.augment(images, [torch.Generator().manual_seed(0)] * 2)
    np.testing.assert_allclose(out[1].numpy(), images, atol=1e-6)
    moved = DigitsLeNetTask().augment(images, [torch.Generator().manual_seed(0)])
    assert not np.allclose(moved[0].numpy(), images)


@pytest.mark.parametrize("threads", [1, 2])
def test_digits_client_data_is_each_replicas_own_augmentation_and_features(threads):
    # client_data holds one thread setting for all replicas; each replica's features are still
    # those of augment + features on that replica alone, bit for bit, on any thread count.
    task = DigitsLeNetTask(**TINY_DIGITS)
    generators = lambda: [torch.Generator().manual_seed(s) for s in (4, 5, 6)]  # noqa: E731
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        data = task.client_data(1, ReplicaGenerators(generators(), []))
        images = task.dataset()[0][task.client_base_images(1)]
        alone = torch.cat([task.features(task.augment(images, [g])) for g in generators()])
    finally:
        torch.set_num_threads(before)
    assert data.inputs.shape == (3, task.n_examples, 84)
    assert torch.equal(data.inputs, alone)
    assert not torch.equal(data.inputs[0], data.inputs[1])  # each replica its own augmentation


def test_digits_pretrained_network_is_cached_and_accurate():
    task = DigitsLeNetTask()
    body, head = task.pretrained()
    _, _, xte, yte = task.dataset()
    with torch.no_grad():
        acc = (head(body(torch.from_numpy(xte).unsqueeze(1))).argmax(1).numpy() == yte).mean()
    assert acc > 0.85
    again = DigitsLeNetTask()
    torch.testing.assert_close(again.fixed_params()[0], head.weight)


def test_sigkill_at_random_moments_then_resume_is_bit_identical(tmp_path, cli):
    # Three kills, each 1-2 chunks after the last (seed 0: after 2, 2 and 1 more chunks), at a
    # random moment in or between chunks: a fresh sampling and two resumed ones are killed, the
    # dump verifies after each, and the rerun resumes past the lock the last one left. The clean
    # run and the rerun need no process of their own.
    args = ["sample", "--task", "signal-rnn", "--runs", "40", "--chunk-size", "2", "--seed", "4", "--no-progress",
            "--set", "n_layers=2", "--set", "seq_len=16", "--set", "n_examples=64", "--set", "batch_size=8"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    assert cli(args + ["--out", tmp_path / "clean"]).returncode == 0
    manifest = tmp_path / "killed" / "manifest.json"
    kills = kill_at_random_moments([sys.executable, "-m", "mianalysis.cli", *args, "--out", str(tmp_path / "killed")],
                                   lambda: _completed(manifest), env=env, seed=0, times=3,
                                   after_each=lambda: ParameterDump.open(tmp_path / "killed").verify())
    assert cli(args + ["--out", tmp_path / "killed"]).returncode == 0
    assert kills == 3
    for name in ("client_0.f32", "client_1.f32", "client_2.f32", "metrics_0.f32", "metrics_2.f32"):
        assert (tmp_path / "clean" / name).read_bytes() == (tmp_path / "killed" / name).read_bytes()
    clean = json.loads((tmp_path / "clean" / "manifest.json").read_text())
    killed = json.loads((tmp_path / "killed" / "manifest.json").read_text())
    assert [c["sha256"] for c in clean["chunks"]] != [] and clean["chunks"][-1]["stop"] == 40
    assert {c["stop"]: c["sha256"] for c in clean["chunks"]}.items() >= {c["stop"]: c["sha256"] for c in killed["chunks"]}.items()


def _completed(manifest):
    try:
        chunks = json.loads(manifest.read_text())["chunks"]
    except (OSError, ValueError):
        return 0
    return chunks[-1]["stop"] // 2 if chunks else 0


def _write_tiny_mnist(folder, rng, per_digit_train=3, per_digit_test=2):
    from mianalysis.tasks.datasets import write_idx

    folder.mkdir()
    for prefix, per in (("train", per_digit_train), ("t10k", per_digit_test)):
        labels = np.repeat(np.arange(10), per).astype(np.uint8)
        images = rng.integers(0, 256, size=(len(labels), 28, 28)).astype(np.uint8)
        images[:, 10:18, 10:18] = (labels[:, None, None] * 25).astype(np.uint8)  # a learnable mark
        write_idx(folder / f"{prefix}-images-idx3-ubyte", images)
        write_idx(folder / f"{prefix}-labels-idx1-ubyte", labels)
    return folder


def test_idx_round_trip_and_errors(tmp_path, rng):
    from mianalysis.tasks.datasets import read_idx, write_idx

    a = rng.integers(0, 256, size=(4, 5, 6)).astype(np.uint8)
    write_idx(tmp_path / "a", a)
    np.testing.assert_array_equal(read_idx(tmp_path / "a"), a)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="is not an IDX file"):
        read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes((tmp_path / "a").read_bytes()[:-3])
    with pytest.raises(ValueError, match=r"header says shape \(4, 5, 6\)"):
        read_idx(tmp_path / "short")


def test_digits_task_on_mnist_idx_files(tmp_path, rng):
    folder = _write_tiny_mnist(tmp_path / "mnist", rng)
    task = DigitsLeNetTask(mnist_path=str(folder), per_digit=2, batch_size=5, pretrain_epochs=1, lr=1e-3)
    xtr, ytr, xte, yte = task.dataset()
    assert xtr.shape == (30, 28, 28) and xte.shape == (20, 28, 28) and xtr.max() <= 1.0
    result = ParameterSampler(task, seed=0, progress=False).train_chunk(range(2))
    assert result.samples.shape == (3, 5, 2, 850)  # 20 examples / batch 5: 4 iterations
    assert np.all((result.metrics[:, 1] >= 0) & (result.metrics[:, 1] <= 1))  # accuracy
    with pytest.raises(FileNotFoundError, match="has no train-images-idx3-ubyte"):
        DigitsLeNetTask(mnist_path=str(tmp_path)).dataset()
