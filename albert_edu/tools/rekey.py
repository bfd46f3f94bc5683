"""Committed results carried over to today's fingerprints after a change to the training code that leaves every
weight as it was (an input check, a clearer error message):

    albert-edu rekey --base REV RUN [RUN ...]

A run's fingerprint (chapter 8's run_key) hashes the source of the training code, so any edit to it makes every
committed result look stale, although nothing the code computes has changed. The committed checkpoints are quick to
make again (`albert-edu checkpoints`); chapter 11's full grid and chapter 10's full fine-tuning grid are not (hours).
This command carries those files over, and refuses unless three things hold:

1. every fingerprint they record is the one that commit REV's code gives (so they were current before the change:
   nothing stale is carried over), and their scoring code is today's;
2. the runs named (of chapter 11's grids), trained again by today's code, equal their committed summaries in
   everything but time and fingerprint (held-out scores, per-document predictions, learning curve, evaluations),
   and the all-shared ones unroll to the same depth scores;
3. today's fingerprints differ from REV's (there is something to carry over).

Then it writes today's fingerprints into the ablation grids (each run's `key`) and the fine-tuning grids (the names of
their pre-trained starts), and appends a record of the check to each file's `rekeyed` list: the commit before and
after, and the runs trained again. Name runs that take the code paths the change touched.
"""

import json
import subprocess
from pathlib import Path

from albert_edu.tools.manifest import ROOT

# the committed results whose runs the tests hold to today's fingerprints
GRIDS = ("ablations-book", "ablations-full", "finetune-book", "finetune-full")
# what a run trained again may differ in when its weights do not: its fingerprint, and how long it took
REKEY_IGNORED = ("key", "seconds", "tokens_per_s", "resumed_at")


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


def _differences(again: dict, committed: dict) -> list[str]:
    return sorted(k for k in set(again) | set(committed) if k not in REKEY_IGNORED and again.get(k) != committed.get(k))


def rekeyed(base: str, names: list[str], results_dir: Path, runs_dir: Path, data_dir: Path, workers: int = 2,
            grids: tuple[str, ...] = GRIDS) -> dict[Path, dict]:
    """The carried-over contents of the files `grids` (of GRIDS), by path (nothing is written here)."""
    from albert_edu.ablations import ablation_runs, depth_scores, unique_runs
    from albert_edu.downstream import FINETUNE_RECIPES
    from albert_edu.experiments import run_dir, run_key, run_summary, scoring_key, table5_runs, train_all
    from albert_edu.tools.checkpoints import commit

    unknown = [g for g in grids if g not in GRIDS]
    if not grids or unknown:
        raise RekeyError(f"grids {list(grids)}: expected some of {GRIDS}")
    code, scoring = sources_at(base), scoring_key()
    files, runs_of = {}, {}  # the contents of each file; each ablation grid's runs by name
    for grid_name in grids:
        kind, recipe = grid_name.split("-")
        path = Path(results_dir) / f"{grid_name}.json"
        results = files[path] = json.loads(path.read_text())
        if kind == "ablations":
            grid = runs_of[path] = {r.name: r for r in unique_runs(ablation_runs(recipe))}
            if set(results["runs"]) != set(grid):
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
    if all(run_key(r, data_dir) == run_key(r, data_dir, code=code) for grid in runs_of.values() for r in grid.values()):
        raise RekeyError(f"the training code is the same as at {base}: nothing to carry over")

    chosen = {name: path for path, grid in runs_of.items() for name in names if name in grid}
    unknown = [name for name in names if name not in chosen]
    if not names or unknown:
        raise RekeyError(f"expected one or more runs of the ablation grids carried over, to train again "
                         f"(unknown: {unknown})")
    for name, path in zip(names, train_all([runs_of[chosen[n]][n] for n in names], runs_dir, data_dir, workers)):
        results = files[chosen[name]]
        differ = _differences(run_summary(path), results["runs"][name])
        if name in results["depths"]:  # the all-shared runs of Table 4, unrolled to other depths
            committed = results["depths"][name]
            depths = tuple(int(d) for d in committed if d.isdigit())
            if json.loads(json.dumps(depth_scores(path, depths, data_dir))) != committed:
                differ.append("depths")
        if differ:
            raise RekeyError(f"{name}, trained again by today's code, differs from the committed run in {differ}: "
                             f"the change altered training; train the grids again")

    record = {"from": base, "to": commit(), "trained_again": list(names)}
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
