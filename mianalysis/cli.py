"""The `mianalysis` command."""

from __future__ import annotations

import argparse
import sys


def _load_array(path, name):
    import numpy as np

    try:
        if str(path).endswith(".npy"):
            return np.load(path, allow_pickle=False)
        return np.loadtxt(path, ndmin=2)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read `{name}` from {path}: {exc}") from exc


def _cmd_demo(args):
    from .demo import estimator_table, format_table

    print("Mutual information (bits) of correlated Gaussians: exact vs estimated")
    print(format_table(estimator_table(seed=args.seed)))
    print(
        "\ngauss-plugin: log-det formula of the core paper; gauss: with the Wishart bias"
        " correction;\nksg: KSG algorithm 1, k=3; p(gauss), p(ksg): permutation p-values"
        " (20 shuffles of the pairing; the smallest possible is 1/21)."
    )


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


def build_parser():
    parser = argparse.ArgumentParser(
        prog="mianalysis",
        description="Mutual information and distances between federated clients' parameter vectors.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="estimators vs closed forms on generated Gaussian data")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_cmd_demo)

    est = sub.add_parser("estimate", help="MI between two sample arrays (.npy or text, rows = samples)")
    est.add_argument("x")
    est.add_argument("y")
    est.add_argument("--estimator", choices=["ksg", "gaussian"], default="ksg")
    est.add_argument("-k", type=int, default=3)
    est.add_argument("--algorithm", type=int, choices=[1, 2], default=1)
    est.add_argument("--units", choices=["bits", "nats"], default="bits")
    est.add_argument("--permutations", type=int, default=0, help="permutation test with this many shuffles")
    est.add_argument("--seed", type=int, default=None)
    est.set_defaults(func=_cmd_estimate)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except (ValueError, TypeError) as exc:
        print(f"mianalysis {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
