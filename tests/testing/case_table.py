"""Case tables for the checks that train many layouts (tests/layouts/check_*.py).

A check declares its comparisons as a table of named cases (Case: a layout's
settings and the function that runs it and compares it) and the reference
runs they compare against (Baseline: a single-rank run, or files, shared by
several cases), then calls main(). main() gives every check the same command
line:

  check_x.py TETRA_BINARY                 every case, in table order
  check_x.py TETRA_BINARY --case A,B --case C   only those (shell-style
                                          patterns such as 'fp32.*' too)
  check_x.py [TETRA_BINARY] --list        the case names, one a line
  check_x.py [TETRA_BINARY] --list-ctest  the table for tests/scripts.cmake:
                                          `check NAME`, then `baseline NAME
                                          RANKS TIMEOUT` and `case NAME RANKS
                                          TIMEOUT BASELINE...` lines
  check_x.py TETRA_BINARY --baseline NAME computes one baseline into the cache
                                          (ctest's fixture set-up entries)
  --work-dir DIR (or $TETRA_TEST_WORK_DIR) keeps the baselines in
  DIR/baselines/CHECK/ and each case's scratch files in DIR/scratch/CHECK/
  (removed when the case passes, kept when it fails, or with --keep);
  without it, both go to a temporary directory removed at the end.

A new case is a Case appended to the check's CASES (a name of letters,
digits, _ . -; its ranks; the function that runs and checks it, often a
functools.partial of the check's comparison with the layout's `--set`s; the
baselines it reads); one more reference run is a Baseline in its BASELINES.
tests/scripts.cmake makes an entry of each at configure time.

Baselines are cached by key: the binary (resolved path, size, modification
time), the check's script, this module and tetra_runs.py (their contents: a
change to the code that describes a run makes a new key), and the baseline's
name, ranks and settings. A baseline is computed in a temporary directory
next to its final one and renamed into place, so two processes (ctest -j)
that compute it at once both end with the same complete copy; a directory
under its final name is always complete.
"""
import argparse
import dataclasses
import fnmatch
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import traceback
from typing import Callable

from tetra_runs import Checker, train

# ctest's TIMEOUT for an entry: a floor for start-up, plus an allowance per
# rank of each run it launches (runs take 0.3-5 s on 2 cores; this leaves
# room for a loaded machine).
TIMEOUT_FLOOR_S, TIMEOUT_PER_RANK_RUN_S = 60, 15
NAME = re.compile(r"[A-Za-z0-9_.-]+")


@dataclasses.dataclass(frozen=True)
class Baseline:
    """A run (or files) that cases compare against, computed once per key.

    produce(tetra, out) writes the files into the directory `out`; settings
    are what they depend on (part of the cache key, and written beside them
    in baseline.json); runs is how many tetra runs produce launches."""
    name: str
    produce: Callable[[str, str], None]
    settings: tuple
    ranks: int = 1
    runs: int = 1

    @property
    def timeout(self):
        return TIMEOUT_FLOOR_S + TIMEOUT_PER_RANK_RUN_S * self.runs * self.ranks


def train_baseline(name, sets, ranks=1, prepare=None):
    """A `tetra train` run with the `--set`s `sets` (metrics.jsonl in its
    directory); "{out}" in a set stands for that directory (export_path,
    data paths). prepare(out), when given, writes input files there first."""
    sets = tuple(sets)

    def produce(tetra, out):
        if prepare:
            prepare(out)
        train(tetra, out, ranks, [s.replace("{out}", out) for s in sets])

    return Baseline(name, produce, ("tetra train", ranks) + sets, ranks)


@dataclasses.dataclass(frozen=True)
class Case:
    """One named comparison: run(ctx) launches the case's own runs (at most
    `ranks` ranks each, `runs` of them) and checks them through ctx.check
    against the baselines named in `baselines` (ctx.baseline(name))."""
    name: str
    ranks: int
    run: Callable
    baselines: tuple = ()
    runs: int = 1

    @property
    def timeout(self):
        return TIMEOUT_FLOOR_S + TIMEOUT_PER_RANK_RUN_S * self.runs * self.ranks


class Produced:
    """A baseline's directory, and its metrics.jsonl read once."""

    def __init__(self, path):
        self.path = path
        self._metrics = None

    @property
    def metrics(self):
        if self._metrics is None:
            with open(os.path.join(self.path, "metrics.jsonl")) as f:
                self._metrics = [json.loads(line) for line in f]
        return self._metrics


def _file_digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Baselines:
    """The cache of one check's baselines under DIR/baselines/CHECK/."""

    def __init__(self, check_name, table, work_dir, tetra, script):
        self.table, self.tetra = table, tetra
        self.dir = os.path.join(work_dir, "baselines", check_name)
        here = os.path.dirname(os.path.abspath(__file__))
        code = (script, os.path.join(here, "case_table.py"), os.path.join(here, "tetra_runs.py"))
        stat = os.stat(tetra)
        self.identity = {"binary": [os.path.realpath(tetra), stat.st_size, stat.st_mtime_ns],
                         "code": [_file_digest(path) for path in code]}
        self.produced, self.failed = {}, {}

    def get(self, name):
        """The baseline `name`: from this process, from the cache, or computed now."""
        if name in self.produced:
            return self.produced[name]
        if name in self.failed:
            sys.exit(f"FAIL: baseline {name} failed above: {self.failed[name]}")
        baseline = self.table[name]
        described = dict(self.identity, name=name, ranks=baseline.ranks, settings=list(baseline.settings))
        key = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]
        final = os.path.join(self.dir, f"{name}-{key}")
        if not os.path.isdir(final):
            os.makedirs(self.dir, exist_ok=True)
            partial = tempfile.mkdtemp(prefix=f".{name}-{key}-", dir=self.dir)
            try:
                print(f"baseline {name}: computing into {final}", flush=True)
                baseline.produce(self.tetra, partial)
                with open(os.path.join(partial, "baseline.json"), "w") as f:
                    json.dump(described, f, indent=1)
                os.chmod(partial, 0o755)  # mkdtemp's 0700 otherwise
                try:
                    os.rename(partial, final)
                except OSError:  # another process renamed its copy first: keep that one
                    if not os.path.isdir(final):
                        raise
            except SystemExit as e:
                self.failed[name] = str(e).splitlines()[0] if str(e) else "failed"
                raise
            finally:
                shutil.rmtree(partial, ignore_errors=True)
        else:
            print(f"baseline {name}: cached in {final}", flush=True)
        self.produced[name] = Produced(final)
        return self.produced[name]


class Context:
    """What a case's run function gets: the binary, the checker, its
    baselines and a scratch directory of its own."""

    def __init__(self, tetra, check, baselines, scratch):
        self.tetra, self.check, self._baselines, self.scratch = tetra, check, baselines, scratch

    def baseline(self, name):
        return self._baselines.get(name)

    def fresh(self, name):
        """A new empty directory in the case's scratch directory."""
        path = os.path.join(self.scratch, name)
        os.makedirs(path)
        return path


def _parse(doc, argv):
    parser = argparse.ArgumentParser(description=doc.split("\n")[0],
                                     epilog="Cases and baselines: tests/testing/case_table.py; tests/README.md.")
    parser.add_argument("tetra", nargs="?", metavar="TETRA_BINARY", help="the tetra binary under test")
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    parser.add_argument("--list-ctest", action="store_true", help="print the table for tests/scripts.cmake")
    parser.add_argument("--case", action="append", default=[], metavar="NAME[,NAME...]",
                        help="run only these cases (repeatable; shell-style patterns allowed)")
    parser.add_argument("--baseline", action="append", default=[], metavar="NAME",
                        help="compute (or find cached) these baselines, run no case")
    parser.add_argument("--work-dir", default=os.environ.get("TETRA_TEST_WORK_DIR"),
                        help="where baselines are cached and scratch files go (default: $TETRA_TEST_WORK_DIR, "
                             "else a temporary directory removed at the end)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch files of passing cases too")
    return parser, parser.parse_args(argv)


def _select(parser, patterns, names, what):
    """The names (in table order) that the comma lists in `patterns` name."""
    wanted = [p for arg in patterns for p in arg.split(",") if p]
    if patterns and not wanted:
        parser.error(f"--{what} needs a name")
    for pattern in wanted:
        if not fnmatch.filter(names, pattern):
            parser.error(f"no {what} {pattern!r}; --list prints the cases" if what == "case" else
                         f"no {what} {pattern!r}; --list-ctest prints the baselines")
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in wanted)]


def main(doc, check_name, cases, baselines, success, argv=None):
    """Runs a check's command line (see this module's docstring) over its
    table: `cases` (Case), `baselines` (Baseline); `success` is the line
    printed when every case of the whole table passes."""
    table = {b.name: b for b in baselines}
    names = [c.name for c in cases]
    for name in names + list(table):
        assert NAME.fullmatch(name), f"{name!r}: case and baseline names are letters, digits, _ . -"
    assert len(set(names)) == len(names) and len(table) == len(baselines), "duplicate names"
    for case in cases:
        unknown = set(case.baselines) - set(table)
        assert not unknown, f"case {case.name} names unknown baselines {sorted(unknown)}"
    parser, args = _parse(doc, argv)
    if args.list:
        print("\n".join(names))
        return
    if args.list_ctest:
        print(f"check {check_name}")
        for b in baselines:
            print(f"baseline {b.name} {b.ranks} {b.timeout}")
        for c in cases:
            print(" ".join(["case", c.name, str(c.ranks), str(c.timeout)] + list(c.baselines)))
        return
    if not args.tetra:
        parser.error("TETRA_BINARY is needed to run cases")
    tetra = os.path.abspath(args.tetra)
    script = os.path.abspath(sys.modules["__main__"].__file__)
    selected_baselines = _select(parser, args.baseline, list(table), "baseline")
    selected = _select(parser, args.case, names, "case") if args.case else ([] if args.baseline else names)

    with tempfile.TemporaryDirectory(prefix=f"tetra-{check_name}-") as temporary:
        work_dir = os.path.abspath(args.work_dir) if args.work_dir else temporary
        cache = Baselines(check_name, table, work_dir, tetra, script)
        for name in selected_baselines:
            cache.get(name)
        if not selected:
            print(f"baselines ready: {' '.join(selected_baselines)}")
            return
        check = Checker()
        failed = []
        for case in (c for c in cases if c.name in selected):
            print(f"== {check_name}.{case.name} ({case.ranks} rank{'s' if case.ranks > 1 else ''})", flush=True)
            scratch_dir = os.path.join(work_dir, "scratch", check_name)
            os.makedirs(scratch_dir, exist_ok=True)
            scratch = tempfile.mkdtemp(prefix=f"{case.name}-", dir=scratch_dir)
            before = len(check.failures)
            try:
                case.run(Context(tetra, check, cache, scratch))
            except SystemExit as e:  # a run that failed (tetra_runs.run_tetra) or a failed baseline
                print(e, flush=True)
                check(False, f"{case.name}: {str(e).splitlines()[0] if str(e) else 'exited'}")
            except Exception as e:  # noqa: BLE001 (a broken case fails alone; the others still run)
                traceback.print_exc()
                check(False, f"{case.name}: {type(e).__name__}: {e}")
            if len(check.failures) > before:
                failed.append(case.name)
                if args.work_dir:
                    print(f"   {case.name} failed; its scratch files stay in {scratch}")
            elif not args.keep:
                shutil.rmtree(scratch, ignore_errors=True)
        if failed:
            print(f"{len(failed)} of {len(selected)} cases failed: {' '.join(failed)}")
        whole = len(selected) == len(names)
        check.exit(success if whole else f"{len(selected)} of {len(names)} cases pass")
