"""The `mianalysis` command."""

from __future__ import annotations

import argparse
import sys

from . import __version__


def _load_array(path, name):
    import numpy as np

    try:
        if str(path).endswith(".npy"):
            return np.load(path, allow_pickle=False)
        # Text: comma-separated (.csv) or whitespace-separated, one sample per row.
        return np.loadtxt(path, ndmin=2, delimiter="," if str(path).endswith(".csv") else None)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read `{name}` from {path}: {exc}") from exc


def _cmd_demo(args):
    if args.estimators_only:
        from .demo import estimator_table, format_table

        print("Mutual information (bits) of correlated Gaussians: exact vs estimated")
        print(format_table(estimator_table(seed=args.seed)))
        print(
            "\ngauss-plugin: log-det formula of the core paper; gauss: with the Wishart bias"
            " correction;\nksg: KSG algorithm 1, k=3; p(gauss), p(ksg): permutation p-values"
            " (20 shuffles of the pairing; the smallest possible is 1/21)."
        )
        return
    from .demo import run_demo

    run_demo(out_dir=args.out, runs=args.runs, seed=args.seed, progress=not args.no_progress)


def _cmd_estimate(args):
    from . import gaussian_mi, ksg_mi, mi_permutation_test

    x = _load_array(args.x, "x")
    y = _load_array(args.y, "y")
    kwargs = {"units": args.units}
    if args.estimator == "ksg":
        kwargs.update(k=args.k, algorithm=args.algorithm)
    if args.permutations:
        res = mi_permutation_test(
            x, y, estimator=args.estimator, n_permutations=args.permutations, random_state=args.seed, **kwargs
        )
        print(
            f"{args.estimator} MI = {res.estimate:.6g} {args.units}; null mean {res.null_mean:.6g} "
            f"sd {res.null_std:.6g}; p = {res.pvalue:.4g} ({res.n_permutations} permutations)"
        )
    else:
        if args.estimator == "ksg":
            value = ksg_mi(x, y, random_state=args.seed, **kwargs)
        else:
            value = gaussian_mi(x, y, **kwargs)
        print(f"{args.estimator} MI = {value:.6g} {args.units}")


def _parse_settings(pairs):
    import json

    settings = {}
    for item in pairs or []:
        if "=" not in item:
            raise ValueError(f"--set expects KEY=VALUE; got {item!r}")
        key, value = item.split("=", 1)
        try:
            settings[key] = json.loads(value)
        except json.JSONDecodeError:
            settings[key] = value
    return settings


def _cmd_sample(args):
    from .sampling import ParameterSampler
    from .tasks import get_task

    task = get_task(args.task, args.preset, **_parse_settings(args.set))
    sampler = ParameterSampler(task, seed=args.seed, init=args.init, every=args.every,
                               chunk_size=args.chunk_size, progress=not args.no_progress)
    dump = sampler.sample(args.runs, args.out)
    print(f"wrote {dump}")


def _cmd_analyze(args):
    from .analysis import analyze, sidecar_path
    from .dumps import ParameterDump

    dump = ParameterDump.open(args.dump)  # one view of the dump: a sampler may still be adding runs
    rows = analyze(dump, estimators=args.estimators, metrics=args.metrics, k=args.k,
                   permutations=args.permutations, layer=args.layer, random_state=args.seed,
                   out=args.out, progress=not args.no_progress,
                   distance_cache=False if args.no_distance_cache else "auto")
    print(f"wrote {len(rows)} rows to {args.out} (settings and provenance: {sidecar_path(args.out)})")
    if not dump.complete:
        print(f"mianalysis analyze: dump incomplete: analysed {dump.completed_runs} of {dump.n_runs} runs (every "
              "row's note says so); analyse again when the dump is complete", file=sys.stderr)


def _cmd_plot(args):
    from .analysis import read_table
    from .plots import save_figure

    path = save_figure(read_table(args.table), args.kind, args.out, title=args.title)
    print(f"wrote {path}")


def _write_federate_settings(path, settings, session, resumed):
    """Write federate's settings.json: the simulation's settings and a list ``provenance``
    of sessions, this one last. A resumed recording keeps the sessions of an earlier
    settings.json with the same settings; the provenance never counts as a setting."""
    import json

    settings = json.loads(json.dumps(settings))
    sessions = []
    if resumed and path.exists():
        try:
            earlier = json.loads(path.read_text())
        except (OSError, ValueError):
            earlier = None
        if isinstance(earlier, dict) and isinstance(earlier.get("provenance"), list) and \
                {k: v for k, v in earlier.items() if k != "provenance"} == settings:
            sessions = earlier["provenance"]
    record = {**settings, "provenance": sessions + [session]}
    path.write_text(json.dumps(record, indent=1) + "\n")


def _cmd_federate(args):
    from pathlib import Path

    from ._provenance import collect, utc_now
    from ._locking import WriterLock, lock_path
    from .federated import (FederatedConfig, FederatedData, FederatedSimulation, history_table,
                            record_replicates, write_rows)

    started = utc_now()
    if args.task == "digits":
        partition_args = {"alpha": args.alpha} if args.partition == "dirichlet" else {}
        data = FederatedData.digits(args.clients, args.partition, seed=args.seed, mnist_path=args.mnist_path,
                                    **partition_args)
    elif args.task == "environments":
        data = FederatedData.environments(n_clients=args.clients, equal_size=args.partition != "unequal",
                                          seed=args.seed)
    else:
        raise ValueError(f"`task` must be 'digits' or 'environments'; got {args.task!r}")
    config = FederatedConfig(rounds=args.rounds, client_fraction=args.fraction, local_epochs=args.epochs,
                             batch_size=None if args.batch in (None, 0) else args.batch, lr=args.lr,
                             algorithm=args.algorithm, aggregator=args.aggregator,
                             aggregator_params=_parse_settings(args.param), weighted=not args.unweighted,
                             placement=args.placement)
    sim = FederatedSimulation(args.model, data, config, replicates=args.replicates, seed=args.seed)
    out = Path(args.out)
    # What a federate run writes in OUT: the dump, its staging folder and writer lock, tables.
    ours = {"dump", ".dump.creating", lock_path(out / "dump").name, "history.csv", "settings.json", "client_eb.csv"}
    with WriterLock(out):  # one federate run per OUT (its dump has its own lock as well)
        if out.exists() and (not out.is_dir() or not {p.name for p in out.iterdir()} <= ours):
            raise ValueError(f"{out} exists and holds files other than a federate run's; choose another folder")
        out.mkdir(parents=True, exist_ok=True)
        if args.record:
            _, history = record_replicates(sim, out / "dump", chunk_size=args.chunk_size, layer=args.layer,
                                           progress=not args.no_progress)
        else:
            history, _ = sim.run(progress=not args.no_progress, log_client_eb=args.client_eb)
            if args.client_eb:
                write_rows(sim.client_eb, out / "client_eb.csv")
        rows = history_table(history, out / "history.csv")
        _write_federate_settings(out / "settings.json", sim.describe(), collect(started, finished=True),
                                 resumed=args.record)
    last = rows[-1]
    print(f"round {last['round']}: test accuracy {last['test_accuracy']:.4f}, test loss {last['test_loss']:.4f} "
          f"(mean of {last['replicates']} replicates); wrote {out / 'history.csv'}")


def _cmd_verify(args):
    from .dumps import ParameterDump

    dump = ParameterDump.open(args.dump)
    runs = dump.verify()
    state = "complete" if dump.complete else f"incomplete ({runs} of {dump.n_runs} runs)"
    print(f"{args.dump}: OK, {runs} runs verified, {state}")


class _OneLineParser(argparse.ArgumentParser):
    """Argument errors as one line ("mianalysis sample: error: ..."), no usage block."""

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser():
    parser = _OneLineParser(
        prog="mianalysis",
        description="Mutual information and distances between federated clients' parameter vectors.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="the main job on generated data: sample, analyse and plot signal-rnn")
    demo.add_argument("--out", default="runs/demo", help="folder for the dump, table and figures")
    demo.add_argument("--runs", type=int, default=400)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--no-progress", action="store_true")
    demo.add_argument("--estimators-only", action="store_true",
                      help="instead: estimators vs closed forms on correlated Gaussians")
    demo.set_defaults(func=_cmd_demo)

    est = sub.add_parser("estimate", help="MI between two sample arrays (.npy, .csv or whitespace-separated text; rows = samples)")
    est.add_argument("x")
    est.add_argument("y")
    est.add_argument("--estimator", choices=["ksg", "gaussian"], default="ksg")
    est.add_argument("-k", type=int, default=3)
    est.add_argument("--algorithm", type=int, choices=[1, 2], default=1)
    est.add_argument("--units", choices=["bits", "nats"], default="bits")
    est.add_argument("--permutations", type=int, default=0, help="permutation test with this many shuffles")
    est.add_argument("--seed", type=int, default=None)
    est.set_defaults(func=_cmd_estimate)

    from .tasks import TASKS

    smp = sub.add_parser("sample", help="retrain every client many times and write a dump")
    smp.add_argument("--task", required=True, choices=sorted(TASKS))
    smp.add_argument("--preset", default="paper", help="settings preset (paper, long)")
    smp.add_argument("--runs", type=int, required=True)
    smp.add_argument("--out", required=True, help="dump folder (resumed if it holds the same sampling)")
    smp.add_argument("--seed", type=int, default=0)
    smp.add_argument("--init", choices=["per-run", "fixed"], default="per-run")
    smp.add_argument("--every", type=int, default=1, help="checkpoint every this many iterations")
    smp.add_argument("--chunk-size", type=int, default=64, help="runs trained together")
    smp.add_argument("--set", action="append", metavar="KEY=VALUE", help="task setting (JSON value)")
    smp.add_argument("--no-progress", action="store_true")
    smp.set_defaults(func=_cmd_sample)

    ana = sub.add_parser("analyze", help="MI and distances between clients per checkpoint of a dump")
    ana.add_argument("dump")
    ana.add_argument("--out", required=True, help="CSV table to write")
    ana.add_argument("--estimators", nargs="+", default=["gaussian", "ksg"])
    ana.add_argument("--metrics", nargs="+", default=["euclidean", "manhattan", "chebyshev"])
    ana.add_argument("-k", type=int, default=3)
    ana.add_argument("--permutations", type=int, default=0)
    ana.add_argument("--layer", action="append", help="analyse only this tensor (repeatable)")
    ana.add_argument("--seed", type=int, default=0)
    ana.add_argument("--no-distance-cache", action="store_true",
                     help="do not keep each client's runs x runs KSG distance matrix in memory")
    ana.add_argument("--no-progress", action="store_true")
    ana.set_defaults(func=_cmd_analyze)

    plo = sub.add_parser("plot", help="figure from an analysis table")
    plo.add_argument("table")
    plo.add_argument("--out", required=True)
    plo.add_argument("--kind", choices=["mi", "distances"], default="mi")
    plo.add_argument("--title")
    plo.set_defaults(func=_cmd_plot)

    fed = sub.add_parser("federate", help="simulate federated training (FedAvg, FedSGD, any aggregator)")
    fed.add_argument("--task", default="digits",
                     help="data set: digits (8x8, or MNIST with --mnist-path) or environments (synthetic "
                          "multi-environment task; --partition unequal for unequal client sizes)")
    fed.add_argument("--mnist-path")
    fed.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    fed.add_argument("--clients", type=int, default=100)
    fed.add_argument("--partition", choices=["iid", "shards", "dirichlet", "unequal"], default="iid")
    fed.add_argument("--alpha", type=float, default=0.5, help="Dirichlet concentration")
    fed.add_argument("--algorithm", choices=["fedavg", "fedsgd"], default="fedavg")
    fed.add_argument("--placement", choices=["update", "step"], default="update",
                     help="apply the aggregator to the round's client messages, or (with --algorithm fedsgd) to "
                          "the clients' minibatch gradients at every step")
    fed.add_argument("--client-eb", action="store_true",
                     help="log each client's EB criterion per round into OUT/client_eb.csv")
    fed.add_argument("--aggregator", default="fedavg", help="fedavg, fedsgd, median, trimmed_mean, and_mask, geometric_mask")
    fed.add_argument("--param", action="append", metavar="KEY=VALUE", help="aggregator parameter, e.g. threshold=0.2")
    fed.add_argument("--rounds", type=int, default=50)
    fed.add_argument("--fraction", type=float, default=0.1, help="C: fraction of clients per round")
    fed.add_argument("--epochs", type=int, default=1, help="E: local epochs")
    fed.add_argument("--batch", type=int, default=10, help="B: local batch size; 0 = full batch")
    fed.add_argument("--lr", type=float, default=0.05)
    fed.add_argument("--unweighted", action="store_true", help="do not weight clients by data size")
    fed.add_argument("--replicates", type=int, default=1)
    fed.add_argument("--record", action="store_true", help="record every client's model per round into OUT/dump")
    fed.add_argument("--layer", action="append", help="record only this tensor (repeatable)")
    fed.add_argument("--chunk-size", type=int, default=16, help="replicates recorded together (with --record)")
    fed.add_argument("--seed", type=int, default=0)
    fed.add_argument("--out", required=True)
    fed.add_argument("--no-progress", action="store_true")
    fed.set_defaults(func=_cmd_federate)

    ver = sub.add_parser("verify", help="check a dump's files and checksums")
    ver.add_argument("dump")
    ver.set_defaults(func=_cmd_verify)
    return parser


def main(argv=None):
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argument errors (exit 2) and --help (exit 0)
        return exc.code
    try:
        args.func(args)
    except (ValueError, TypeError, OSError) as exc:
        print(f"mianalysis {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
