"""The digits example through Flower's deployment engine: a SuperLink, SuperNodes and `flwr run`.

The test starts `flower-superlink` and two `flower-supernode`s as subprocesses (every
address 127.0.0.1 on a free port, --insecure, telemetry off, runtime dependency
installation off, a hard timeout on each), submits one `flwr run` per seed whose ServerApp
records its run into one dump (mianalysis.flower.record_deployment), and compares that
dump with the one record_runs writes in this process on a LocalGrid for the same seeds:
the same samples and metrics, byte for byte. No simulation engine (no Ray): the
SuperNodes run each ClientApp call in a `flwr-clientapp` process of their own.

Every process the test starts, and every process those start (Flower detaches some into
sessions of their own), carries a marker in its environment; the cleanup ends each of them
by its id, on success and on failure, and the test checks that none is left.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from mianalysis import ParameterDump  # noqa: E402
from mianalysis.flower import record_runs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "flower"
BIN = Path(sys.executable).parent  # flwr's commands, installed beside this Python
MARKER = "MIANALYSIS_FLOWER_DEPLOYMENT_TEST"

NODES = 2
SEEDS = [0, 1]
# A small, quick run of the example: one round, 4 hidden units, few batches, no evaluation
# on the clients (each message a SuperNode handles starts a ClientApp process).
CONFIG = {"num-server-rounds": 1, "hidden": 4, "batch-size": 50, "fraction-evaluate": 0.0}

STARTUP_S = 120  # SuperLink up and every SuperNode connected (a loaded 2-core machine is slow)
RUN_S = 300  # one `flwr run` to its end
PROCESS_S = STARTUP_S + len(SEEDS) * RUN_S + 60  # the SuperLink and SuperNodes are killed after this

pytestmark = pytest.mark.skipif(not (BIN / "flower-superlink").exists() or not Path("/proc/self/environ").exists(),
                                reason="needs Flower's commands beside this Python and /proc (Linux) for the cleanup")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def marked_processes(token):
    """Ids of the processes whose environment holds MARKER=token (this user's, readable ones)."""
    found = []
    needle = f"{MARKER}={token}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # gone, or another user's
            continue
    return found


def end_processes(pids, grace_s=5.0):
    """SIGTERM each of `pids`, then SIGKILL those still alive after `grace_s`."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while wait and time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.1)


class Deployment:
    """A SuperLink and SuperNodes on 127.0.0.1, and `flwr run`, all in `folder`."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.home = self.folder / "flwr_home"
        self.home.mkdir(parents=True)
        self.logs = self.folder / "logs"
        self.logs.mkdir()
        self.token = uuid.uuid4().hex
        self.env = {**os.environ,
                    MARKER: self.token,
                    "FLWR_TELEMETRY_ENABLED": "0",
                    "FLWR_HOME": str(self.home),  # Flower's config, installed apps and state: here only
                    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
                    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # Flower starts its commands by name
                    "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
                    "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # PyTorch on one thread, as record_seeds.py
        self.processes = []
        self.port = free_port()

    def start(self, name, args):
        # The hard timeout of a long-lived process: coreutils' `timeout` ends it even if this
        # test process dies; the timer, where `timeout` is missing, while it lives.
        limit = ["timeout", "-k", "10", str(PROCESS_S)] if shutil.which("timeout") else []
        log = open(self.logs / f"{name}.log", "wb")
        process = subprocess.Popen([*limit, str(BIN / args[0]), *args[1:]], env=self.env, stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.folder)
        log.close()
        timer = threading.Timer(PROCESS_S + 15, process.kill)
        timer.daemon = True
        timer.start()
        self.processes.append((name, process, timer))
        return process

    def log(self, name):
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs_tail(self, lines=25):
        return "\n".join(f"--- {p.name} (last {lines} lines)\n" + "\n".join(p.read_text(errors="replace")
                                                                          .splitlines()[-lines:])
                         for p in sorted(self.logs.iterdir()))

    def wait_for(self, what, ready, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            for name, process, _ in self.processes:
                if process.poll() is not None:
                    pytest.fail(f"{name} exited with {process.returncode} while waiting for {what}\n"
                                f"{self.logs_tail()}")
            time.sleep(0.5)
        pytest.fail(f"timed out after {timeout} s waiting for {what}\n{self.logs_tail()}")

    def __enter__(self):
        address = f"127.0.0.1:{self.port}"
        # One HTTP port for the SuperLink's Runtime (ServerApp), Control (flwr run) and Fleet
        # (SuperNodes) APIs in Flower 1.42; its gRPC APIs stay off unless asked for.
        self.start("superlink", ["flower-superlink", "--insecure", "--host", "127.0.0.1", "--port", str(self.port),
                                 "--disable-runtime-dependency-installation"])
        self.wait_for("the SuperLink", lambda: "Uvicorn running on" in self.log("superlink"), STARTUP_S)
        for p in range(NODES):
            # Each SuperNode's own Runtime API (its ClientApp processes connect there) on another port.
            self.start(f"supernode{p}", ["flower-supernode", "--insecure", "--superlink", address,
                                         "--host", "127.0.0.1", "--port", str(free_port()),
                                         "--node-config", f"partition-id={p} num-partitions={NODES}"])
        self.wait_for(f"{NODES} SuperNodes to connect",
                      lambda: self.log("superlink").count("Activated node_id=") >= NODES, STARTUP_S)
        # `flwr run`'s connection: the Flower config in FLWR_HOME, one SuperLink, insecure.
        (self.home / "config.toml").write_text(f'[superlink]\ndefault = "test"\n\n[superlink.test]\n'
                                               f'address = "{address}"\ninsecure = true\n')
        return self

    def flwr_run(self, overrides, name):
        """`flwr run` of the example with the run-config `overrides`, streamed to its end."""
        config = self.folder / f"{name}.toml"
        config.write_text("".join(f"{key} = {toml_value(value)}\n" for key, value in overrides.items()))
        result = subprocess.run([str(BIN / "flwr"), "run", str(EXAMPLE), "test", "--run-config", str(config),
                                 "--stream"], env=self.env, cwd=self.folder, capture_output=True, text=True,
                                timeout=RUN_S)
        (self.logs / f"{name}.log").write_text(result.stdout + result.stderr)
        assert result.returncode == 0, f"flwr run failed:\n{result.stdout}\n{result.stderr}\n{self.logs_tail()}"
        return result

    def run_statuses(self):
        """The status of every run the SuperLink knows (`flwr ls`), e.g. "finished:completed"."""
        result = subprocess.run([str(BIN / "flwr"), "ls", "test", "--format", "json"], env=self.env, cwd=self.folder,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"flwr ls failed:\n{result.stdout}\n{result.stderr}"
        listed = json.loads(result.stdout[result.stdout.index("{"):])
        runs = listed["runs"] if isinstance(listed, dict) else listed
        return sorted(run["status"] for run in runs)

    def __exit__(self, *exc_info):
        # Every process of this deployment: those started here and their descendants, even
        # those Flower detached from their parent (found by the marker in their environment).
        for _, process, timer in self.processes:
            timer.cancel()
        end_processes([p.pid for _, p, _ in self.processes if p.poll() is None])
        end_processes(marked_processes(self.token))
        for _, process, _ in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def toml_value(value):
    return f'"{value}"' if isinstance(value, str) else str(value)


def load_example():
    sys.path.insert(0, str(EXAMPLE))
    try:
        return {name: importlib.import_module(f"digits_app.{name}") for name in ("client_app", "server_app", "task")}
    finally:
        sys.path.remove(str(EXAMPLE))


def dump_files(path):
    """The dump's sample and metric files, by name, as bytes (the manifest differs: meta, provenance)."""
    return {f.name: f.read_bytes() for f in sorted(Path(path).iterdir()) if f.suffix == ".f32"}


def test_example_through_superlink_and_supernodes_records_the_local_grids_bytes(tmp_path):
    import torch

    example = load_example()
    config = {**example["task"].DEFAULT_CONFIG, **CONFIG}
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        local = record_runs(example["server_app"].app, example["client_app"].app, tmp_path / "local",
                            num_partitions=NODES, rounds=config["num-server-rounds"], seeds=SEEDS,
                            run_config={k: v for k, v in config.items() if k != "seed"})
    finally:
        torch.set_num_threads(before)

    deployed_path = tmp_path / "deployed"
    with Deployment(tmp_path / "deployment") as deployment:
        for run, seed in enumerate(SEEDS):
            deployment.flwr_run({**CONFIG, "seed": seed, "mianalysis.dump": str(deployed_path),
                                 "mianalysis.run": run, "mianalysis.runs": len(SEEDS)}, f"flwr_run_{run}")
        # `flwr run` exits with 0 even when the ServerApp fails: the SuperLink knows how each run ended.
        statuses = deployment.run_statuses()
        token = deployment.token
        logs = deployment.logs_tail()
    assert statuses == ["finished:completed"] * len(SEEDS), f"{statuses}\n{logs}"
    assert marked_processes(token) == [], "processes of the deployment are left running"

    assert deployed_path.exists(), f"the deployed ServerApp wrote no dump\n{logs}"
    deployed = ParameterDump.open(deployed_path)
    assert deployed.completed_runs == len(SEEDS), logs
    assert (deployed.clients, deployed.checkpoints) == (local.clients, local.checkpoints) == (["0", "1"], [0, 1])
    assert [(e.name, e.shape) for e in deployed.layout] == [(e.name, e.shape) for e in local.layout]
    assert deployed.metric_names == local.metric_names == ["num-examples", "train_loss"]
    # The same bytes: every client's samples and metrics, and the chunks' checksums.
    assert deployed.chunk_records() == local.chunk_records()
    assert dump_files(deployed_path) == dump_files(tmp_path / "local")
    assert deployed.verify() == len(SEEDS)
    # Not trivially equal: the two seeds give two different runs.
    first, second = local.chunk_records()
    assert first["sha256"] != second["sha256"]
    assert deployed.meta["flower"]["deployment"] is True and deployed.meta["flower"]["num_partitions"] == NODES
