"""The `mianalysis` command."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence

from . import __version__

__all__ = ["main", "build_parser"]


def _progress(args):
    """Whether to draw progress bars: not with --no-progress or -q."""
    return not (getattr(args, "no_progress", False) or args.quiet)


def _say(args, message):
    """Print an informational line (what was written) unless -q."""
    if not args.quiet:
        print(message)


def _configure_logging(verbosity, quiet):
    """Show library messages (logger "mianalysis") on stderr while a command runs: warnings
    and errors with -q, progress notes (e.g. resuming) by default, every chunk, checkpoint
    and round with -v. Returns a function that restores the logger as it was."""
    logger = logging.getLogger("mianalysis")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s" if verbosity else "mianalysis: %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.DEBUG if verbosity else logging.INFO)

    def restore():
        logger.removeHandler(handler)
        logger.setLevel(level)

    return restore


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
        from .report.demo import estimator_table, format_table

        print("Mutual information (bits) of correlated Gaussians: exact vs estimated")
        print(format_table(estimator_table(seed=args.seed)))
        print(
            "\ngauss-plugin: log-det formula of the core paper; gauss: with the Wishart bias"
            " correction;\nksg: KSG algorithm 1, k=3; p(gauss), p(ksg): permutation p-values"
            " (20 shuffles of the pairing; the smallest possible is 1/21)."
        )
        return
    from .report.demo import demo_report, run_demo

    started = time.perf_counter()
    rows = run_demo(out_dir=args.out, runs=args.runs, seed=args.seed, progress=_progress(args))
    print(demo_report(rows, args.out, runs=args.runs, seed=args.seed, seconds=time.perf_counter() - started))


def _judged_line(judged):
    """How `estimate` prints a judged number (:class:`mianalysis.JudgedMI`): "MI =" for an
    estimate, "MI >=" for a bound, and never "MI" for another number outside calibration
    (a shrinkage number among them)."""
    from .estimators.registry import get_estimator

    if judged.kind == "estimate":
        relation = "MI ="
    elif judged.kind == "lower bound" or get_estimator(judged.estimator).kind == "bound":
        relation = "MI >="
    else:
        relation = "gives"
    return f"{judged.estimator} {relation} {judged.value:.6g} {judged.units} ({judged.kind}): {judged.reason}"


def _cmd_estimate(args):
    import dataclasses

    from . import mi, mi_permutation_test
    from ._internal.validation import check_paired, varying_columns
    from .analysis.inference.choice import AUTO
    from .analysis.inference.judged import judge
    from .estimators.registry import estimators_taking, get_estimator

    x = _load_array(args.x, "x")
    y = _load_array(args.y, "y")
    arguments = frozenset() if args.estimator == AUTO else get_estimator(args.estimator).arguments
    kwargs = {}
    for name, flag in (("k", "-k"), ("algorithm", "--algorithm")):
        if getattr(args, name) is not None:
            if name not in arguments:
                raise ValueError(f"{flag} applies to --estimator {' or '.join(estimators_taking(name))}")
            kwargs[name] = getattr(args, name)
    if args.shrinkage != "none" and "shrinkage" not in arguments:
        raise ValueError(f"--shrinkage applies to --estimator {' or '.join(estimators_taking('shrinkage'))}")
    if args.shrinkage != "none":
        kwargs["shrinkage"] = args.shrinkage
    if not args.permutations:  # the number, what it is and why (mianalysis.mi)
        print(_judged_line(mi(x, y, estimator=args.estimator, units=args.units, random_state=args.seed, **kwargs)))
        return
    auto = mi(x, y, units=args.units, random_state=args.seed) if args.estimator == AUTO else None
    name = args.estimator if auto is None else auto.estimator  # the rule's choice, then its null
    units = {"units": args.units} if "units" in get_estimator(name).arguments else {}
    res = mi_permutation_test(x, y, estimator=name, n_permutations=args.permutations, random_state=args.seed,
                              **kwargs, **units)
    if auto is not None:
        judged = dataclasses.replace(auto, value=res.estimate)
    else:
        x, y = check_paired(x, y)
        keep_x, keep_y = varying_columns(x), varying_columns(y)
        d = int(keep_x.sum() + keep_y.sum()) if keep_x.any() and keep_y.any() else 0
        judged = judge(name, x.shape[0], d, res.estimate, units=args.units, shrinkage="shrinkage" in kwargs)
    print(f"{_judged_line(judged)}; null mean {res.null_mean:.6g} sd {res.null_std:.6g}; p = {res.p_value:.4g} "
          f"({res.n_permutations} permutations)")


# --set / --param values spelled as Python writes a flag; JSON's true and false parse as well. Any
# other value of a flag (0, "no", ...) is refused by the setting's own check.
PYTHON_FLAGS = {"True": True, "False": False}


def _parse_settings(pairs):
    import json

    settings = {}
    for item in pairs or []:
        if "=" not in item:
            raise ValueError(f"--set expects KEY=VALUE; got {item!r}")
        key, value = item.split("=", 1)
        if value in PYTHON_FLAGS:  # Python's spelling of a flag, as well as JSON's true / false
            settings[key] = PYTHON_FLAGS[value]
            continue
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
                               chunk_size=args.chunk_size, progress=_progress(args), shared=args.shared or (),
                               reference=args.reference)
    dump = sampler.sample(args.runs, args.out, **_dask_options(args))
    _say(args, f"wrote {dump}")


def _dask_options(args):
    """The keyword arguments of --scheduler and --scheduler-timeout (none without a scheduler)."""
    if args.scheduler is None:
        return {}
    return {"scheduler": args.scheduler, "timeout": args.scheduler_timeout}


def _add_scheduler_options(parser, work):
    parser.add_argument("--scheduler", metavar="SCHEDULER",
                        help=f"compute {work} on Dask workers: local:N (N worker processes here, on loopback), "
                             "tcp://HOST:PORT, or a scheduler file (needs the dask extra)")
    parser.add_argument("--scheduler-timeout", type=float, default=None, metavar="SECONDS",
                        help="seconds to reach the scheduler and find a worker, and to wait for one when none is "
                             "left (default 10)")


def _add_flags(parser, flags, **changes):
    """Add an option object's command-line flags (:class:`mianalysis.analysis.options.Flag`,
    its ``FLAGS``) as declared there, help text included; `changes` (a command's own
    `default` and `help`) apply to each."""
    for flag in flags:
        parser.add_argument(flag.flag, **flag.argparse_keywords(**changes))


def _cmd_export(args):
    from .dumps.arrays import export_zarr

    result = export_zarr(args.dump, args.zarr, verify=not args.no_verify)
    _say(args, f"exported {result['runs']} runs of {args.dump} to {result['path']} (zarr v3; read back and checked "
          f"against the SHA-256 of every array)")


def _cmd_analyze(args):
    from .analysis import analyze, sidecar_path
    from .analysis.options import Execution, options_from_flags
    from .dumps import ParameterDump

    dump = ParameterDump.open(args.dump)  # one view of the dump: a sampler may still be adding runs
    execution = Execution(progress=_progress(args), distance_cache=False if args.no_distance_cache else "auto",
                          **_dask_options(args))
    table = analyze(dump, estimators=args.estimators, metrics=args.metrics, k=args.k, layer=args.layer, by=args.by,
                    standardize=not args.no_standardize, random_state=args.seed, out=args.out,
                    verify=not args.no_verify, force=args.force, gaussianity=args.gaussianity,
                    min_moving_runs=args.min_moving_runs, execution=execution,
                    **options_from_flags(vars(args)))  # null, interval, correction: from their flags
    verified = ("dump checksums NOT verified (--no-verify)" if args.no_verify
                else f"dump checksums of {table.settings['n_runs']} runs verified")
    _say(args, f"wrote {len(table)} rows to {args.out} ({verified}; settings and provenance: {sidecar_path(args.out)})")
    if not dump.complete:
        print(f"mianalysis analyze: dump incomplete: analysed {dump.completed_runs} of {dump.n_runs} runs (every "
              "row's note says so); run the same command again when the dump is complete to replace the table", file=sys.stderr)
    _print_trends(table, args.ci_level)
    _print_bottom_line(table, dump)


def _cmd_report(args):
    from .report import SUMMARY, report

    done = report(args.dump, args.out, n_permutations=args.permutations, estimators=args.estimators,
                  random_state=args.seed, progress=_progress(args), by=None if args.by == "vector" else args.by)
    others = ", ".join(f.name for f in done.files if f.name != SUMMARY)
    _say(args, f"wrote {done.out_dir / SUMMARY} (what each row means, which rows to read, the trends) and {others} "
               f"in {done.seconds:.0f} s")


def _print_trends(rows, level):
    from .report.experiment import TRENDS, trend_summary

    summary = trend_summary(rows)
    if summary:
        print(f"trends, from the {TRENDS} (the {level:.0%} intervals' error rate; the correction on the next line):")
        print(summary)


def _print_bottom_line(table, dump):
    """The bottom line that report.md opens with (mianalysis.report.bottom_line): the last lines printed."""
    from .report import reference_headroom
    from .report.bottom_line import bottom_line, format_bottom_line
    from .report.plots import checkpoint_label

    label = checkpoint_label({**table.sidecar, "dump_meta": {"shared": [], **dict(dump.meta)}})
    print(format_bottom_line(bottom_line(table, label=label, headroom=reference_headroom(dump))))


def _cmd_plot(args):
    from .analysis import AnalysisTable
    from .report.plots import check_drawable, save_figure

    table = AnalysisTable.read(args.table)
    try:
        check_drawable(table, args.kind)
    except ValueError as exc:
        raise ValueError(f"{args.table}: {exc}") from None
    path = save_figure(table, args.kind, args.out, title=args.title, metric=args.metric)  # titled from its sidecar
    _say(args, f"wrote {path}")
    if any(r["verdict"] for r in table):
        _print_trends(table, _table_level(table))


def _table_level(table):
    """The interval level an AnalysisTable's settings record (0.95 if they record none)."""
    try:
        return float(table.settings["ci_level"])
    except (ValueError, KeyError, TypeError):
        return 0.95


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
    import os
    from pathlib import Path

    from .provenance import collect, utc_now
    from ._internal.locking import WriterLock, lock_path
    from .analysis.studies.history import write_history_table
    from .federated import (FederatedConfig, FederatedData, FederatedSimulation, history_rows,
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
    ours = {"dump", ".dump.creating", lock_path(out / "dump").name, "history.csv", "history.csv.json", "settings.json",
            "client_eb.csv"}
    with WriterLock(out):  # one federate run per OUT (its dump has its own lock as well)
        if out.exists() and (not out.is_dir() or not {p.name for p in out.iterdir()} <= ours):
            raise ValueError(f"{out} exists and holds files other than a federate run's; choose another folder")
        for name in ("dump", ".dump.creating", "history.csv", "history.csv.json", "settings.json", "client_eb.csv"):
            # Its own files and folders: never a link, through which another file would be written.
            entry, folder = out / name, name in ("dump", ".dump.creating")
            if os.path.islink(entry):
                raise ValueError(f"{entry} is a symbolic link; federate writes its own files in OUT, never through "
                                 "a link: remove it or choose another folder")
            if os.path.lexists(entry) and os.path.isdir(entry) != folder:
                raise ValueError(f"{entry} is not a {'folder' if folder else 'regular file'}; federate writes its "
                                 "own files in OUT: remove it or choose another folder")
        # OUT is created only once the run is under way: by the recorder, which checks everything
        # before it creates OUT/dump, or after a run that is not recorded. An OUT this command
        # created is removed again if the command fails or is interrupted with nothing in it.
        created = not out.exists()
        try:
            if args.record:
                _, history = record_replicates(sim, out / "dump", chunk_size=args.chunk_size, layer=args.layer,
                                               progress=_progress(args))
            else:
                result = sim.run(progress=_progress(args), log_client_eb=args.client_eb)
                history = result.history
            out.mkdir(parents=True, exist_ok=True)
            if args.client_eb and not args.record:
                write_rows(result.client_eb, out / "client_eb.csv")
            rows = history_rows(history)
            write_history_table(rows, out / "history.csv")
            _write_federate_settings(out / "settings.json", sim.describe(), collect(started, finished=True),
                                     resumed=args.record)
        except BaseException:
            if created and out.is_dir() and not any(out.iterdir()):
                out.rmdir()
            raise
    last = rows[-1]
    print(f"round {last['round']}: test accuracy {last['test_accuracy']:.4f}, test loss {last['test_loss']:.4f} "
          f"(mean of {last['replicates']} replicates); wrote {out / 'history.csv'}")


def _cmd_import(args):
    from .dumps.importers import import_checkpoints

    dump = import_checkpoints(args.root, args.out, key=args.key, layer=args.layer, chunk_size=args.chunk_size,
                              progress=_progress(args))
    _say(args, f"wrote {dump}")


def _cmd_headroom(args):
    from ._internal.validation import check_real
    from .analysis.validate import check_table_out
    from .analysis.studies.headroom import headroom, headroom_rule_lines, headroom_verdicts
    from .provenance import utc_now

    def check_out():  # analyze's rule for a table: never into a dump or onto a folder; a file only with --force
        check_table_out(args.out, args.force, writer="headroom", name="--out", force_hint="--force")

    check_out()  # before any work: a refused --out computes and writes nothing
    started = utc_now()
    check_real(args.near_optimal, "--near-optimal", low=0, high=1, low_open=True)
    rows = headroom(args.dump, reference=args.reference, rules=args.rules, iterations=args.iterations,
                    folds=args.folds, level=args.ci_level, progress=_progress(args))
    verdicts = headroom_verdicts(rows, level=args.ci_level, near_optimal=args.near_optimal)
    check_out()  # again: the file may have appeared meanwhile
    # The table and its sidecar, each a new file renamed into place: a link at --out is replaced, never written through.
    _write_headroom_table(args, rows, verdicts, started)
    _say(args, f"wrote {len(rows)} rows to {args.out} (MSE to the reference {rows[0]['reference']!r}, "
          f"summed over parameters; fitted rules cross-fitted over {args.folds} folds; settings, verdicts and "
          f"provenance: {args.out}.json)")
    for line in headroom_rule_lines(rows, level=args.ci_level):  # the last checkpoint's rules, in words
        print(line)
    print(f"verdicts (intervals Bonferroni over the checkpoints, family-wise {args.ci_level:g}; near-optimal: the best "
          f"combination's fit-corrected ratio interval >= {args.near_optimal:g}):")
    for line in verdicts:
        print(line)


HEADROOM_FORMAT_VERSION = 1  # of the headroom table's sidecar: HEADROOM_TABLE.format_version (tests check)


def _write_headroom_table(args, rows, verdicts, started):
    """The headroom table ``OUT`` and its sidecar ``OUT.json``, written as a study table
    (:class:`mianalysis.analysis.study_table.StudyTable` of
    :data:`~mianalysis.analysis.studies.headroom.HEADROOM_TABLE`): the rows, what was measured
    (the dump, its runs and chunk digest, the reference and settings), the verdicts, the
    format version and the session's provenance."""
    from pathlib import Path

    from .analysis.studies.headroom import HEADROOM_TABLE
    from .analysis.study_table import StudyTable
    from .dumps import ParameterDump
    from .provenance import collect

    dump = ParameterDump.open(args.dump)
    settings = {"reference": args.reference, "reference_used": rows[0]["reference"],
                "rules": sorted({str(r["rule"]) for r in rows}), "iterations": sorted({int(r["iteration"]) for r in rows}),
                "folds": args.folds, "ci_level": args.ci_level, "near_optimal": args.near_optimal,
                "verdict_correction": "Bonferroni over the checkpoints"}
    record = {"dump": str(Path(args.dump).resolve()), "dump_runs": dump.completed_runs,
              "dump_chunks": dump.chunks_digest(), "verdicts": list(verdicts)}
    StudyTable(HEADROOM_TABLE, rows, settings=settings, record=record,
               provenance=collect(started, finished=True)).write(args.out)


def _cmd_verify(args):
    from .dumps import ParameterDump

    dump = ParameterDump.open(args.dump)
    runs = dump.verify()
    state = "complete" if dump.complete else f"incomplete ({runs} of {dump.n_runs} runs)"
    print(f"{args.dump}: OK, {runs} runs verified, {state}")


# Python options that messages of the library suggest, and the flags that set them here.
CLI_WORDS = (
    ("estimator='bound'", "--estimator bound"),
    ("mianalysis.mi chooses", "--estimator auto chooses"),
    ("`placement`='step'", "--placement step"),
    ("set `algorithm`='fedsgd'", "use --algorithm fedsgd"),
)


def _cli_words(message):
    """`message` with each Python option it suggests replaced by the command-line flag."""
    for python, flag in CLI_WORDS:
        message = message.replace(python, flag)
    return message


class _OneLineParser(argparse.ArgumentParser):
    """Argument errors as one line ("mianalysis sample: error: ..."), no usage block."""

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _rule_help(rule):
    """"trimmed_mean (beta=0.1)": a rule's name and its settings' defaults, for help texts."""
    settings = ", ".join(f"{p.name}={p.default!r}" for p in rule.parameters)
    return f"{rule.name} ({settings})" if settings else rule.name


def _placement_help(placement):
    """"step (--algorithm fedsgd): applies the rule to ...", for help texts."""
    needs = "" if placement.algorithms is None else f" (--algorithm {' or '.join(placement.algorithms)})"
    return f"{placement.name}{needs} {placement.description}"


def build_parser() -> argparse.ArgumentParser:
    from .analysis.studies.headroom import MAX_BLUE_DIMENSION
    from .sampling import REFERENCES

    parser = _OneLineParser(
        prog="mianalysis",
        description="Mutual information and distances between federated clients' parameter vectors.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more messages on stderr (every chunk, checkpoint and round)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="only results, warnings and errors: no progress bars or 'wrote' lines")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="the main job on generated data: sample, analyse and plot signal-rnn")
    demo.add_argument("--out", default="runs/demo", help="folder for the dump, table and figures")
    demo.add_argument("--runs", type=int, default=400, help="retraining runs per client")
    demo.add_argument("--seed", type=int, default=0, help="seed of the sampling and the analysis")
    demo.add_argument("--no-progress", action="store_true", help="no progress bars")
    demo.add_argument("--estimators-only", action="store_true",
                      help="instead: estimators vs closed forms on correlated Gaussians")
    demo.set_defaults(func=_cmd_demo)

    est = sub.add_parser("estimate", help="MI between two sample arrays (.npy, .csv or whitespace-separated text; rows = samples)")
    est.add_argument("x", help="samples of X: one run per row")
    est.add_argument("y", help="samples of Y: one run per row, paired with the rows of x")
    from .analysis.options import Holm, Intervals, Permutations
    from .analysis.inference.choice import describe_rule
    from .estimators.registry import estimator_names, estimators_taking

    est.add_argument("--estimator", choices=("auto", *estimator_names()), default="auto",
                     help="'auto' (the default): the Gaussian copula estimate inside its calibrated regime, else the "
                          "held-out lower bound (analyze's rule); or one estimator, computed and judged. The line "
                          "printed says what the number is (estimate, lower bound or outside calibration) and why")
    est.add_argument("-k", type=int, default=None,
                     help=f"neighbours of --estimator {' or '.join(estimators_taking('k'))} (default 3)")
    est.add_argument("--algorithm", type=int, choices=[1, 2], default=None,
                     help=f"KSG algorithm 1 or 2 of --estimator {' or '.join(estimators_taking('algorithm'))} "
                          "(default 1)")
    est.add_argument("--units", choices=["bits", "nats"], default="bits", help="unit of the number printed")
    est.add_argument("--shrinkage", choices=["none", "ledoit-wolf"], default="none",
                     help=f"--estimator {' or '.join(estimators_taking('shrinkage'))}: ledoit-wolf gives the Gaussian "
                          "MI of a shrunk covariance: neither an estimate nor a bound (printed as such); with few "
                          "runs use --estimator auto or bound")
    est.add_argument("--permutations", type=int, default=0, help="permutation test with this many shuffles")
    est.add_argument("--seed", type=int, default=None,
                     help="seed of the shuffles, KSG's tie-breaking noise and the bound's splits")
    est.set_defaults(func=_cmd_estimate)

    from .tasks import TASKS

    smp = sub.add_parser("sample", help="retrain every client many times and write a dump")
    smp.add_argument("--task", required=True, choices=sorted(TASKS),
                     help="module: your own torch.nn.Module, named by --set factory=package.module:function (a "
                          "function of no arguments returning a mianalysis.tasks.ModuleSpec; settings optimizer, "
                          "lr, batch_size, epochs, record, eval_examples)")
    smp.add_argument("--preset", default="paper", help="settings preset (paper, long; gaussian-sgd: paper, small, high)")
    smp.add_argument("--runs", type=int, required=True, help="retraining runs of every client")
    smp.add_argument("--out", required=True, help="dump folder (resumed if it holds the same sampling)")
    smp.add_argument("--seed", type=int, default=0,
                     help="seed of every run's start and random streams (run r draws from (seed, r))")
    smp.add_argument("--init", choices=["per-run", "fixed"], default="per-run",
                     help="per-run: each run starts from its own point, shared by its clients; fixed: every run "
                          "starts from one point")
    smp.add_argument("--every", type=int, default=1, help="checkpoint every this many iterations")
    smp.add_argument("--chunk-size", type=int, default=64, help="runs trained together")
    smp.add_argument("--set", action="append", metavar="KEY=VALUE", help="task setting (JSON value; True / False are flags too)")
    smp.add_argument("--shared", action="append", metavar="STREAM",
                     help="a random stream the clients of a run share (repeatable; the task's streams: signal-rnn "
                          "order, dropout; digits-lenet order, augmentation; gaussian-sgd data, noise; module order)")
    smp.add_argument("--reference", choices=list(REFERENCES), default=None,
                     help="also record a reference client per run: 'optimum', each run's exact optimum theta* of the "
                          "pooled objective (tasks with a convex loss: softmax-regression, digits-head, gaussian-sgd), "
                          "or 'central', the FedSGD reference (the run's start trained on the union of the clients' "
                          "batches at every step; not gaussian-sgd), not the optimum; `mianalysis headroom` uses it, "
                          "`mianalysis analyze` leaves it out of the client pairs")
    smp.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_scheduler_options(smp, "chunks of runs")
    smp.set_defaults(func=_cmd_sample)

    ana = sub.add_parser("analyze", help="MI and distances between clients per checkpoint of a dump")
    ana.add_argument("dump", help="dump folder to analyse (written by sample, federate --record or import)")
    ana.add_argument("--out", required=True, help="CSV table to write")
    ana.add_argument("--estimators", nargs="+", choices=(*estimator_names(), "auto"), default=["auto"],
                     metavar="ESTIMATOR",
                     help="MI estimators: " + ", ".join(estimator_names()) + ", or 'auto' (the default), which "
                          "chooses " + describe_rule() + "; each row's note says which estimator it is and why. "
                          "'gaussian ksg' was the default before 'auto'")
    ana.add_argument("--metrics", nargs="+", default=["euclidean", "manhattan", "chebyshev"], metavar="METRIC",
                     help="pair quantities beside MI: euclidean, manhattan, chebyshev (mean paired distances; the "
                          "default) and cosine_update (mean cosine similarity of the clients' updates since each "
                          "run's start, the checkpoint at iteration 0; opt-in)")
    ana.add_argument("-k", type=int, default=3, help="neighbours of the KSG estimates")
    _add_flags(ana, Permutations.FLAGS)  # --permutations, --gaussian-null: help from the option objects
    ana.add_argument("--layer", action="append", help="analyse only this tensor (repeatable)")
    ana.add_argument("--by", choices=["layer", "auto"],
                     help="layer: rows per tensor (column `layer`) instead of the whole vector; auto: the whole "
                          "vector where the runs cover a calibrated estimate, else blocks of its tensors that they do")
    ana.add_argument("--no-standardize", action="store_true",
                     help="KSG on raw parameter scales (default: each parameter divided by its sd over runs)")
    ana.add_argument("--seed", type=int, default=0,
                     help="seed of the permutations, the interval resamples and KSG's tie-breaking noise")
    _add_flags(ana, Intervals.FLAGS)  # --ci-resamples, --ci-level
    _add_flags(ana, Holm.FLAGS)  # --familywise, --family (those of every correction)
    ana.add_argument("--gaussianity", action="store_true",
                     help="also rows nongaussian_share (per client) and copula_disagrees (per pair): which MI row to read")
    ana.add_argument("--min-moving-runs", type=int, default=1, metavar="M",
                     help="hold each client's parameters moving in fewer than M runs at their most common value for "
                          "the MI estimates (the notes bound what they can add; default 1: none)")
    ana.add_argument("--no-distance-cache", action="store_true",
                     help="do not keep each client's runs x runs KSG distance matrix in memory")
    ana.add_argument("--no-verify", action="store_true",
                     help="do not check the dump's checksums first (the sidecar then says so)")
    ana.add_argument("--force", action="store_true",
                     help="replace an existing --out that is not an earlier analysis with the same settings")
    ana.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_scheduler_options(ana, "checkpoints")
    ana.set_defaults(func=_cmd_analyze)

    from .report import REPORT_PERMUTATIONS

    rep = sub.add_parser("report", help="analyse a dump with a null for every MI row; write the table, figures "
                                        "and report.md (what each row means, which to read, the trends)")
    rep.add_argument("dump", help="dump folder to report on")
    rep.add_argument("--out", required=True,
                     help="folder for the report: new, empty, or an earlier report (replaced); never one with other files")
    _add_flags(rep, [f for f in Permutations.FLAGS if f.flag == "--permutations"], default=REPORT_PERMUTATIONS,
               note=f"default {REPORT_PERMUTATIONS}: p-values down to 1/{REPORT_PERMUTATIONS + 1}")
    rep.add_argument("--estimators", nargs="+", choices=(*estimator_names(), "auto"), default=None, metavar="ESTIMATOR",
                     help="MI estimators (default: those of analyze): " + ", ".join(estimator_names()))
    rep.add_argument("--seed", type=int, default=0, help="seed of the analysis (as analyze --seed)")
    rep.add_argument("--by", choices=["auto", "layer", "vector"], default="auto",
                     help="auto (default): the whole vector where the runs cover a calibrated estimate of it, else "
                          "blocks of its tensors that they do; layer: one row per tensor; vector: the whole vector")
    rep.add_argument("--no-progress", action="store_true", help="no progress bars")
    rep.set_defaults(func=_cmd_report)

    plo = sub.add_parser("plot", help="figure from an analysis table")
    plo.add_argument("table", help="analysis table (CSV written by analyze, with its .json sidecar)")
    plo.add_argument("--out", required=True, help="image file to write (its folder is created; the format from its suffix)")
    plo.add_argument("--kind", choices=["mi", "distances"], default="mi",
                     help="mi: the MI rows with the recorded metric; distances: the mean paired distances")
    plo.add_argument("--title", help="figure title (default: made from the table's sidecar)")
    plo.add_argument("--metric", help="the recorded metric the mi figure draws (default: loss, else the first "
                     "metric whose name has 'loss', such as train_loss, else the first)")
    plo.set_defaults(func=_cmd_plot)

    from .federated.registry import algorithm_names, get_placement, get_rule, placement_names, rule_names

    fed = sub.add_parser("federate", help="simulate federated training (FedAvg, FedSGD, any aggregator)")
    fed.add_argument("--task", default="digits",
                     help="data set: digits (8x8, or MNIST with --mnist-path) or environments (synthetic "
                          "multi-environment task; --partition unequal for unequal client sizes)")
    fed.add_argument("--mnist-path", help="folder of the MNIST IDX files for --task digits (default: the 8x8 digits of scikit-learn)")
    fed.add_argument("--model", choices=["mlp", "cnn"], default="mlp", help="the clients' network")
    fed.add_argument("--clients", type=int, default=100, help="number of clients")
    fed.add_argument("--partition", choices=["iid", "shards", "dirichlet", "unequal"], default="iid",
                     help="how the data are split over the clients (dirichlet: see --alpha; unequal: environments "
                          "with unequal client sizes)")
    fed.add_argument("--alpha", type=float, default=0.5, help="Dirichlet concentration")
    fed.add_argument("--algorithm", choices=algorithm_names(), default="fedavg",
                     help="federated algorithm")
    fed.add_argument("--placement", choices=placement_names(), default="update",
                     help="where the aggregator acts: " + "; ".join(_placement_help(get_placement(name))
                                                                    for name in placement_names()))
    fed.add_argument("--client-eb", action="store_true",
                     help="log each client's EB criterion per round into OUT/client_eb.csv")
    fed.add_argument("--aggregator", choices=rule_names(), default="fedavg", metavar="AGGREGATOR",
                     help="aggregation rule: " + ", ".join(_rule_help(get_rule(name)) for name in rule_names()))
    fed.add_argument("--param", action="append", metavar="KEY=VALUE",
                     help="aggregator parameter (JSON value; True / False are flags too), e.g. threshold=0.2 or "
                          "rescale=false")
    fed.add_argument("--rounds", type=int, default=50, help="communication rounds")
    fed.add_argument("--fraction", type=float, default=0.1, help="C: fraction of clients per round")
    fed.add_argument("--epochs", type=int, default=1, help="E: local epochs")
    fed.add_argument("--batch", type=int, default=10, help="B: local batch size; 0 = full batch")
    fed.add_argument("--lr", type=float, default=0.05, help="clients' learning rate")
    fed.add_argument("--unweighted", action="store_true", help="do not weight clients by data size")
    fed.add_argument("--replicates", type=int, default=1,
                     help="independent replicates of the whole simulation, computed as one batch")
    fed.add_argument("--record", action="store_true", help="record every client's model per round into OUT/dump")
    fed.add_argument("--layer", action="append", help="record only this tensor (repeatable)")
    fed.add_argument("--chunk-size", type=int, default=16, help="replicates recorded together (with --record)")
    fed.add_argument("--seed", type=int, default=0, help="seed of the partition and the replicates")
    fed.add_argument("--out", required=True,
                     help="folder for history.csv, settings.json and, with --record, the dump")
    fed.add_argument("--no-progress", action="store_true", help="no progress bars")
    fed.set_defaults(func=_cmd_federate)

    imp = sub.add_parser("import", help="import ROOT/CLIENT/CHECKPOINT/RUN.pt (or .safetensors) files into a dump")
    imp.add_argument("root", help="folder of client folders, each of checkpoint folders, each of run files")
    imp.add_argument("--out", required=True, help="dump folder (resumed if it holds the same import)")
    imp.add_argument("--key", help="key of the state dict in .pt files that hold several")
    imp.add_argument("--layer", action="append", help="import only this tensor (repeatable)")
    imp.add_argument("--chunk-size", type=int, default=64, help="runs read and written together (memory)")
    imp.add_argument("--no-progress", action="store_true", help="no progress bars")
    imp.set_defaults(func=_cmd_import)

    hdr = sub.add_parser("headroom", help="MSE of combination rules to a reference (the optimum theta*, the FedSGD "
                                          "reference or your own), vs the average, and a verdict per checkpoint")
    hdr.add_argument("dump", help="dump folder with the clients to combine (and the reference, if recorded)")
    hdr.add_argument("--out", required=True,
                     help="CSV table to write: never in a dump, and an existing file only with --force")
    hdr.add_argument("--reference", default="auto",
                     help="'optimum' (the dump's client 'optimum': each run's exact theta*), 'central' (the dump's "
                          "client 'central': the FedSGD reference, not the optimum), another client of the dump (a "
                          "reference of your own), 'task' (gaussian-sgd's exact theta*, recomputed), or 'auto' "
                          "(the default: 'optimum' if the dump has it, else 'central', else 'task'); the clients "
                          "'optimum' and 'central' are never combined")
    hdr.add_argument("--rules", nargs="+",
                     help="combination rules (also 'curvature' on gaussian-sgd; 'inverse_variance', the federated "
                          "rule's name, is the deprecated old name of 'inverse_mse'); default: mean weighted_mean "
                          "inverse_mse blue_coordinate blue, less blue (with a note) where clients x parameters "
                          f"> {MAX_BLUE_DIMENSION}, and curvature where it runs (gaussian-sgd against its exact "
                          "theta*)")
    hdr.add_argument("--iterations", nargs="+", type=int, help="checkpoints (iterations) to measure; all by default")
    hdr.add_argument("--folds", type=int, default=2, help="cross-fitting folds of the fitted rules (default 2)")
    hdr.add_argument("--ci-level", type=float, default=0.95,
                     help="level of the intervals, and family-wise level of the verdicts (default 0.95)")
    hdr.add_argument("--near-optimal", type=float, default=0.95,
                     help="averaging is near-optimal at a checkpoint where the best combination's MSE, as a ratio "
                          "to averaging's, is at least this at the verdicts' family-wise level (default 0.95)")
    hdr.add_argument("--force", action="store_true", help="replace an existing --out (never a link's target)")
    hdr.add_argument("--no-progress", action="store_true", help="no progress bars")
    hdr.set_defaults(func=_cmd_headroom)

    ver = sub.add_parser("verify", help="check a dump's files and checksums")
    ver.add_argument("dump", help="dump folder to check")
    ver.set_defaults(func=_cmd_verify)

    exp = sub.add_parser("export", help="copy a dump's completed runs into a zarr v3 store, with checksums")
    exp.add_argument("dump", help="dump folder to export")
    exp.add_argument("--zarr", required=True, metavar="OUT", help="new zarr store (folder) to write")
    exp.add_argument("--no-verify", action="store_true", help="do not check the dump's checksums first")
    exp.set_defaults(func=_cmd_export)
    return parser


# Commands that train or read PyTorch files: they import torch before they start (see below).
_TORCH_COMMANDS = {"sample", "federate", "demo", "import"}


def _import_torch_undisturbed():
    """Import PyTorch with Ctrl-C held back until the import is done, then delivered.

    A KeyboardInterrupt raised while PyTorch's native modules initialise escapes from C++
    as an exception nothing catches, and the process aborts; an interrupt held back until
    the import finishes is an ordinary KeyboardInterrupt. Nothing to do without PyTorch."""
    import signal
    import threading

    previous = signal.getsignal(signal.SIGINT)
    if "torch" in sys.modules or threading.current_thread() is not threading.main_thread() or previous is None:
        return  # (None: a handler installed outside Python, which cannot be put back from here)
    received = []
    signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    finally:
        signal.signal(signal.SIGINT, previous)
    if received and previous is signal.default_int_handler:
        raise KeyboardInterrupt


def _by_interrupt(exc):
    """Whether `exc` is, or was raised because of, a KeyboardInterrupt (Python 3.11 wraps one
    raised inside ``__set_name__``, as during a class definition in a lazy import, in a
    RuntimeError)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _report_interrupt(args):
    """Print the one line of an interrupted command and return its exit status, 130."""
    # A progress bar left open by the interruption ends its line first (and is not drawn
    # again at exit, after this one).
    tqdm = getattr(sys.modules.get("tqdm.std"), "tqdm", None)
    for bar in list(getattr(tqdm, "_instances", ())):
        try:
            bar.close()
        except Exception:  # a bar is cosmetic: never let it hide the line below
            pass
    print(f"mianalysis {args.command}: {_interrupted(args)}", file=sys.stderr)
    # Under `python -m`, CPython kills itself with SIGINT at exit if a KeyboardInterrupt ever
    # left an exec() of a string (dataclasses and namedtuples are made so, e.g. while torch is
    # imported), even one handled here; an exec() of a string clears that record again.
    exec("")
    return 130


def _interrupted(args):
    """The line an interrupted command prints: whether any of its outputs is on disk.

    Every writer keeps its output resumable at every moment (chunks, journals and manifests
    are replaced atomically), and a dump created by a command that is interrupted before its
    first chunk is removed again; so an output on disk means a rerun resumes it."""
    from pathlib import Path

    out = getattr(args, "out", None)
    outputs = [] if out is None else [Path(out)]
    if out is not None and args.command == "analyze":
        outputs += [Path(str(out) + ".partial"), Path(str(out) + ".json")]  # its journal and sidecar
    written = any(p.is_file() or (p.is_dir() and any(p.iterdir())) for p in outputs)
    return "interrupted; rerun the same command to resume" if written else "interrupted; nothing was written"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argument errors (exit 2) and --help (exit 0)
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    restore_logging = _configure_logging(args.verbose, args.quiet)
    try:
        return _run(args)
    finally:
        restore_logging()


def _run(args):
    """Run the parsed command; its exit status."""
    try:
        if args.command in _TORCH_COMMANDS and not getattr(args, "estimators_only", False):
            _import_torch_undisturbed()
        args.func(args)
    except KeyboardInterrupt:  # Ctrl-C (SIGINT): one line and the shell's status for it, no traceback
        return _report_interrupt(args)
    except (ValueError, TypeError, OSError, ImportError) as exc:  # ImportError: an optional extra is missing
        if _by_interrupt(exc):
            return _report_interrupt(args)
        print(f"mianalysis {args.command}: error: {_cli_words(str(exc))}", file=sys.stderr)
        return 2
    except Exception as exc:
        if _by_interrupt(exc):
            return _report_interrupt(args)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
