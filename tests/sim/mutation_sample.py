"""A stratified random sample of mutmut 3's mutants, and the kill rate it estimates.

A complete ``make mutation-sim`` is hours on a shared machine (a surviving mutant runs
every simulator test that reaches its function). This draws a random sample per module
(the strata), proportional to the module's mutants with a floor, and estimates the kill
rate from the verdicts mutmut stored: per stratum, the sample's rate over the mutants
with a verdict, weighted by the stratum's size, with the usual 95 % interval (normal
approximation, finite population correction). Within a stratum only a prefix of a random
order counts (``--prefix``), so that verdicts still missing (mutmut runs the fastest
mutants first) cannot bias the rate towards the fast ones.

    # in the directory mutmut runs in, after mutants/ exists (any ``mutmut run``):
    python tests/sim/mutation_sample.py sample --size 300 --seed 20261128 > sample.txt
    mutmut run $(cat sample.txt)            # or a part of it: see ``order``
    python tests/sim/mutation_sample.py estimate --prefix 8

Survivors can be run again against newer tests one by one (``MUTANT_UNDER_TEST=name
pytest ...`` in the mutants/ copy, the tests that should now fail them); a file of
``KILLED<TAB>name`` lines from such runs (``--recheck``) counts them as killed.

``exclude`` lists module name parts left out of the population (``delete_records``:
``make mutation-sim`` does not mutate it; the simulator has no DeleteRecords).
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import math
import random
import sys
from pathlib import Path

KILLED = {1, 3, 24, -24, 152, 255, 36, -11, -9, 37}  # failed tests, timeouts, crashes
SURVIVED = 0
NO_TESTS = {5, 33}
NO_VERDICT = {None, 2}  # not run yet; interrupted
STATE = Path("mutants/sample.json")


def _verdicts() -> dict[str, int | None]:
    codes: dict[str, int | None] = {}
    for meta in glob.glob("mutants/src/**/*.meta", recursive=True):
        codes.update(json.loads(Path(meta).read_text())["exit_code_by_key"])
    return codes


def module_of(mutant: str) -> str:
    return mutant.split(".x")[0]


def sample(size: int, seed: int, exclude: list[str], order_seed: int | None) -> None:
    names = sorted(n for n in _verdicts() if not any(x in n for x in exclude))
    strata: dict[str, list[str]] = collections.defaultdict(list)
    for n in names:
        strata[module_of(n)].append(n)
    rng = random.Random(seed)
    order: dict[str, list[str]] = {}
    for m, members in sorted(strata.items()):
        k = min(len(members), max(6, round(len(members) * size / len(names))))
        order[m] = rng.sample(members, k)  # a random order: prefixes are random samples
    if order_seed is not None:  # a second, independent order (as the 2026-11-28 figure's)
        shuffle = random.Random(order_seed)
        for m in sorted(order):
            order[m] = sorted(order[m])
            shuffle.shuffle(order[m])
    STATE.write_text(json.dumps({"seed": seed, "population": strata, "order": order}))
    for m in order:
        print("\n".join(order[m]))


def order(prefix: int) -> None:
    """The mutants of each stratum's first ``prefix`` without a kill yet (to run next)."""
    state = json.loads(STATE.read_text())
    codes = _verdicts()
    for members in state["order"].values():
        for n in members[:prefix]:
            if codes.get(n) not in KILLED:
                print(n)  # survivors too: tests may have been added since


def estimate(prefix: int | None, rechecks: list[str], equivalent: list[str]) -> None:
    state = json.loads(STATE.read_text())
    codes = _verdicts()
    # mutants judged equivalent by reading them (message text): left out of their
    # stratum's verdicts, the stratum's size kept (their share is assumed alike elsewhere)
    left_out = {n for path in equivalent for n in Path(path).read_text().split()}
    for path in rechecks:  # "KILLED<TAB>mutant" lines: a later test run killed a survivor
        for line in Path(path).read_text().splitlines():
            verdict, mutant = line.split("\t")[:2]
            if verdict == "KILLED" and codes.get(mutant) not in NO_VERDICT:
                codes[mutant] = 1
    population = state["population"]
    total = sum(len(v) for v in population.values())
    est = var = 0.0
    unmeasured = 0
    print(f"{'module':42s} {'mutants':>7s} {'verdicts':>8s} {'killed':>6s} {'rate':>6s}  survivors")
    for m, members in sorted(state["order"].items()):
        big_n = len(population[m])
        chosen = members if prefix is None else members[:prefix]
        have = [n for n in chosen if codes.get(n) not in NO_VERDICT]
        if prefix is not None and len(have) < len(chosen):
            have = []  # an incomplete prefix is not a random sample: the stratum is unmeasured
        have = [n for n in have if n not in left_out]
        killed = sum(codes[n] in KILLED for n in have)
        survivors = [n.split(".", 2)[2] for n in have if codes[n] not in KILLED]
        if not have:
            unmeasured += big_n
            print(f"{m:42s} {big_n:7d} {0:8d} {'':>6s} {'-':>6s}")
            continue
        p = killed / len(have)
        est += big_n * p
        if len(have) > 1:
            var += big_n**2 * (1 - len(have) / big_n) * p * (1 - p) / (len(have) - 1)
        print(f"{m:42s} {big_n:7d} {len(have):8d} {killed:6d} {p:6.2f}  {' '.join(survivors)}")
    measured = total - unmeasured
    if measured:
        print(
            f"kill rate {100 * est / measured:.1f} % +- {100 * 1.96 * math.sqrt(var) / measured:.1f}"
            f" (95 %) over the {measured} mutants of the measured strata; {unmeasured} of "
            f"{total} in strata without a complete sample"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--size", type=int, default=300)
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--exclude", action="append", default=["delete_records"])
    s.add_argument("--order-seed", type=int)
    o = sub.add_parser("order")
    o.add_argument("--prefix", type=int, required=True)
    e = sub.add_parser("estimate")
    e.add_argument("--prefix", type=int)
    e.add_argument(
        "--recheck",
        action="append",
        default=[],
        help="a file of 'KILLED<TAB>mutant' lines: survivors killed since by newer tests",
    )
    e.add_argument(
        "--equivalent",
        action="append",
        default=[],
        help="a file of mutant names judged equivalent, left out of the verdicts",
    )
    args = parser.parse_args(argv)
    if args.command == "sample":
        sample(args.size, args.seed, args.exclude, args.order_seed)
    elif args.command == "order":
        order(args.prefix)
    else:
        estimate(args.prefix, args.recheck, args.equivalent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
