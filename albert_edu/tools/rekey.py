"""Committed results carried over to today's fingerprints after a change to the training code that leaves every
weight as it was (an input check, a clearer error message):

    albert-edu rekey --base REV RUN [RUN ...]

A run's fingerprint (chapter 8's run_key) hashes the source of the training code, so any edit to it makes every
committed result look stale, although nothing the code computes has changed. The committed checkpoints are quick to
make again (`albert-edu checkpoints`); chapter 11's full grid and chapter 10's full fine-tuning grid are not (hours).
This command carries those files over, and refuses unless three things hold:

1. every fingerprint they record is the one that commit REV's code gives (so they were current before the change:
   nothing stale is carried over), and their scoring code is today's;
2. the runs named (of chapter 11's grids), trained again by REV's code (in a temporary work tree of that commit) and by
   today's, have the same weights bit for bit (the change alters no weight), and their summaries agree with the
   committed ones (held-out scores, per-document predictions, learning curve, evaluations) to within the rounding
   that another machine's arithmetic gives: 1e-6 relatively or 2e-5 absolutely (the logs keep 5 decimals);
3. today's fingerprints differ from REV's (there is something to carry over).

Then it writes today's fingerprints into the ablation grids (each run's `key`) and the fine-tuning grids (the names of
their pre-trained starts), and appends a record of the check to each file's `rekeyed` list: the commit before and
after, and the runs trained again. Name runs that take the code paths the change touched.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

from albert_edu.tools.manifest import ROOT

# the committed results whose runs the tests hold to today's fingerprints
GRIDS = ("ablations-book", "ablations-full", "ablations-table6-rates", "finetune-book", "finetune-full")
# what a run trained again may differ in when its weights do not: its fingerprint, and how long it took
REKEY_IGNORED = ("key", "seconds", "tokens_per_s", "resumed_at")
# the same arithmetic on another processor or library build rounds differently in the last bits
REL_TOL, ABS_TOL = 1e-6, 2e-5


class RekeyError(ValueError):
    """The committed results cannot be carried over; the message says which and why."""


def sources_at(base: str) -> dict[str, bytes]:
    """The training code's files (CODE_FILES) as commit `base` holds them."""
    from albert_edu.experiments import CODE_FILES

    code = {}
    for name in CODE_FILES:
        shown = subprocess.run(["git", "show", f"{base}:albert_edu/{name}"], cwd=ROOT, capture_output=True, timeout=60)
        if shown.returncode:
            raise RekeyError(f"--base {base}: git cannot show albert_edu/{name} there ({shown.stderr.decode().strip()}); "
                             f"expected a commit of this repository with the same training modules")
        code[name] = shown.stdout
    return code


def _commit_of(rev: str) -> str:
    """The full hash of a commit named any way git understands (HEAD~1, a tag, a short hash)."""
    found = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    if found.returncode:
        raise RekeyError(f"--base {rev}: not a commit of this repository ({found.stderr.strip()})")
    return found.stdout.strip()


def _code_commit() -> str:
    """The commit whose training code runs now: HEAD's hash, with "-dirty" when a training module differs from it."""
    from albert_edu.experiments import CODE_FILES

    head = _commit_of("HEAD")
    changed = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", *(f"albert_edu/{n}" for n in CODE_FILES)],
                             cwd=ROOT, timeout=60).returncode
    return head[:12] + ("-dirty" if changed else "")


def _close(a, b) -> bool:
    """Equal but for rounding: numbers within REL_TOL or ABS_TOL, everything else (answers, counts, names) exactly."""
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or a is None or b is None:
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b


def _differences(again: dict, committed: dict) -> list[str]:
    """The fields of a run's summary that differ beyond rounding."""
    return sorted(k for k in set(again) | set(committed)
                  if k not in REKEY_IGNORED and not _close(again.get(k), committed.get(k)))


def weights(path: Path) -> bytes:
    """A finished run's weight file, in whichever layout it was saved."""
    from albert_edu.checkpoint import OUR_WEIGHTS, WEIGHTS

    found = [path / name for name in (WEIGHTS, OUR_WEIGHTS) if (path / name).is_file()]
    return found[0].read_bytes()


TRAIN_AT_BASE = """
import json, sys
from pathlib import Path
from albert_edu.ablations import ablation_runs, unique_runs
from albert_edu.experiments import train_all
names, runs_dir, data_dir, workers = json.loads(sys.argv[1])
runs = {r.name: r for recipe in ("book", "full") for r in unique_runs(ablation_runs(recipe))}
print(json.dumps([str(p) for p in train_all([runs[n] for n in names], Path(runs_dir), Path(data_dir), workers)]))
"""


def train_at(base: str, names: list[str], runs_dir: Path, data_dir: Path, workers: int) -> list[Path]:
    """Train the named runs of chapter 11's grids with commit `base`'s code, in a temporary work tree of it, into
    the run cache `runs_dir` (so that a second attempt reuses them)."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "tree"
        added = subprocess.run(["git", "worktree", "add", "--detach", str(tree), base], cwd=ROOT, capture_output=True,
                               text=True, timeout=300)
        if added.returncode:
            raise RekeyError(f"--base {base}: git cannot check it out ({added.stderr.strip()})")
        try:
            done = subprocess.run([sys.executable, "-c", TRAIN_AT_BASE,
                                   json.dumps([names, str(runs_dir), str(data_dir), workers])], cwd=scratch,
                                  env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True, timeout=300)
    if done.returncode:
        raise RekeyError(f"training {names} with the code of {base} failed: {done.stderr.strip()[-2000:]}")
    return [Path(p) for p in json.loads(done.stdout.strip().splitlines()[-1])]


def rekeyed(base: str, names: list[str], results_dir: Path, runs_dir: Path, data_dir: Path,
            grids: tuple[str, ...] = GRIDS) -> dict[Path, dict]:
    """The carried-over contents of the files `grids` (of GRIDS), by path (nothing is written here)."""
    from albert_edu.ablations import depth_scores, grid_runs
    from albert_edu.finetune_recipes import FINETUNE_RECIPES
    from albert_edu.experiments import run_dir, run_key, run_summary, scoring_key, table5_runs, train_all

    unknown = [g for g in grids if g not in GRIDS]
    if not grids or unknown:
        raise RekeyError(f"grids {list(grids)}: expected some of {GRIDS}")
    base = _commit_of(base)
    runs_dir, data_dir = Path(runs_dir).resolve(), Path(data_dir).resolve()  # train_at runs elsewhere
    code, scoring = sources_at(base), scoring_key()
    files, runs_of = {}, {}  # the contents of each file; each ablation grid's runs by name
    for grid_name in grids:
        kind, recipe = grid_name.split("-", 1)
        path = Path(results_dir) / f"{grid_name}.json"
        results = files[path] = json.loads(path.read_text())
        if kind == "ablations":
            possible = grid_runs(recipe)  # the rate sweep's file holds the runs its sweep chose
            grid = runs_of[path] = {name: possible[name] for name in results["runs"] if name in possible}
            if set(results["runs"]) != set(grid) or (recipe != "table6-rates" and set(grid) != set(possible)):
                raise RekeyError(f"{path}: its runs are not today's {recipe!r} grid; train the grid again")
            for name, summary in results["runs"].items():
                if summary["key"] != run_key(grid[name], data_dir, code=code) or summary["scoring"] != scoring:
                    raise RekeyError(f"{path}: {name} was not current at {base} (its fingerprint or scoring code "
                                     f"differs); train the grid again with `albert-edu ablations --recipe {recipe}`")
        else:
            starts = {r.name: r for r in table5_runs(FINETUNE_RECIPES[recipe]["pretraining"])}
            for start in (s for names_at_base in results["starts"].values() for s in names_at_base if s):
                name = start.rsplit("-", 1)[0]
                if name not in starts or start != f"{name}-{run_key(starts[name], data_dir, code=code)}":
                    raise RekeyError(f"{path}: its start {start} was not current at {base}; train the grid again "
                                     f"with `albert-edu finetune --recipe {recipe}`")
    if not runs_of:
        raise RekeyError(f"grids {list(grids)}: expected an ablation grid among them, whose runs are trained again")
    if all(run_key(r, data_dir) == run_key(r, data_dir, code=code) for grid in runs_of.values() for r in grid.values()):
        raise RekeyError(f"the training code is the same as at {base}: nothing to carry over")

    chosen = {name: path for path, grid in runs_of.items() for name in names if name in grid}
    unknown = [name for name in names if name not in chosen]
    if not names or unknown:
        raise RekeyError(f"expected one or more runs of the ablation grids carried over, to train again "
                         f"(unknown: {unknown})")
    # one run at a time on one thread, as the grids were trained: a run on two threads rounds differently
    at_base = train_at(base, names, Path(runs_dir) / f".rekey-{base}", data_dir, 1)
    for name, path, base_path in zip(names, train_all([runs_of[chosen[n]][n] for n in names], runs_dir, data_dir, 1),
                                     at_base):
        if weights(path) != weights(base_path):
            raise RekeyError(f"{name}: the code of {base} and today's train different weights ({base_path}, {path}): "
                             f"the change altered training; train the grids again")
        results = files[chosen[name]]
        differ = _differences(run_summary(path), results["runs"][name])
        if name in results.get("depths", {}):  # the all-shared runs of Table 4, unrolled to other depths
            committed = results["depths"][name]
            depths = tuple(int(d) for d in committed if d.isdigit())
            if not _close(json.loads(json.dumps(depth_scores(path, depths, data_dir))), committed):
                differ.append("depths")
        if differ:
            raise RekeyError(f"{name}, trained again, differs from the committed run in {differ} beyond rounding "
                             f"(relative {REL_TOL}, absolute {ABS_TOL}): it was not made by this recipe; train the "
                             f"grids again")

    record = {"from": base, "to": _code_commit(), "trained_again": list(names),
              "tolerance": {"rel": REL_TOL, "abs": ABS_TOL}}
    carried = {}
    for path, results in files.items():
        if path in runs_of:  # an ablation grid
            grid = runs_of[path]
            results = {**results, "runs": {n: {**s, "key": run_key(grid[n], data_dir)} for n, s in results["runs"].items()}}
        else:  # a fine-tuning grid: its starts are run directories
            starts = {r.name: r for r in table5_runs(FINETUNE_RECIPES[results["recipe"]]["pretraining"])}
            results = {**results, "starts": {c: [s and run_dir(starts[s.rsplit("-", 1)[0]], data_dir=data_dir).name
                                                 for s in names_at_base] for c, names_at_base in results["starts"].items()}}
        carried[path] = {**results, "rekeyed": results.get("rekeyed", []) + [record]}
    return carried
