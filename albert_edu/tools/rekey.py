"""A committed grid of runs carried over to today's fingerprints after a change to the training code that leaves
every weight as it was (an input check, a clearer error message):

    albert-edu ablations --recipe full --rekey RUN [RUN ...]

A run's fingerprint (chapter 8's run_key) hashes the source of the training code, so any edit makes every
committed result look stale, although nothing it computes has changed. Re-training the whole grid to show that
costs hours; instead the named runs are trained again by today's code, and only if each equals its committed
summary in everything but its time and fingerprint (held-out scores, per-document predictions, learning curve,
evaluations) are today's fingerprints written into the results file, with a record of the check: the commit, the
runs trained again and the fingerprints before. Any difference is an error, and then the grid must be trained
again.
"""

from pathlib import Path

# what a run trained again may differ in when its weights do not: its fingerprint, and how long it took
REKEY_IGNORED = ("key", "seconds", "tokens_per_s", "resumed_at")


def rekey(results: dict, recipe: str, names: list[str], runs_dir: Path, data_dir: Path, workers: int = 2) -> dict:
    """`results` (an ablation grid's file) with today's run keys, after training `names` again and checking them."""
    from albert_edu.ablations import ablation_runs, unique_runs
    from albert_edu.experiments import run_key, run_summary, train_all
    from albert_edu.tools.checkpoints import commit

    grid = {run.name: run for run in unique_runs(ablation_runs(recipe))}
    if set(grid) != set(results["runs"]):
        raise ValueError(f"the results file holds runs {sorted(set(results['runs']) ^ set(grid))} that are not "
                         f"both in it and in today's {recipe!r} grid: train the grid again instead")
    unknown = [name for name in names if name not in grid]
    if not names or unknown:
        raise ValueError(f"--rekey {' '.join(names)}: expected one or more runs of the {recipe!r} grid "
                         f"(unknown: {unknown})")
    for name, path in zip(names, train_all([grid[name] for name in names], runs_dir, data_dir, workers)):
        again, committed = run_summary(path), results["runs"][name]
        differ = sorted(k for k in set(again) | set(committed)
                        if k not in REKEY_IGNORED and again.get(k) != committed.get(k))
        if differ:
            raise ValueError(f"{name}, trained again by today's code, differs from the committed run in {differ}: "
                             f"the change altered training; train the grid again with "
                             f"`albert-edu ablations --recipe {recipe}`")
    record = {"commit": commit(), "checked": list(names),
              "keys_before": {name: summary["key"] for name, summary in results["runs"].items()}}
    return {**results, "runs": {name: {**summary, "key": run_key(grid[name], data_dir)}
                                for name, summary in results["runs"].items()},
            "rekeyed": results.get("rekeyed", []) + [record]}
