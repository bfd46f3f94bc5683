"""Chapter 11's grid, the plumbing its sections point to: the two recipes (how many steps, seeds and embedding
sizes), the model of every cell (chapter 8's experiment model with E, the sharing strategy or dropout changed, or
Table 6's wide variant), how every run trains, the runs per table, a shared model unrolled to other depths, and
`ablation_results`, which trains the grid (or takes it from the run cache) for `albert-edu ablations`. Then how
the grid is read: each cell's held-out loss with intervals over documents, a comparison of two sides against both
kinds of chance (documents and seeds; the statistics are albert_edu.stats, Appendix A), and the plan of
comparisons fixed before the full grid's results existed. albert_edu.ablations re-exports every name."""

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from albert_edu.config import AlbertConfig
from albert_edu.corpus import DATA_DIR
from albert_edu.experiments import (RUNS_DIR, Run, bootstrap_weights, experiment_model, held_out_examples, holm,
                                    interval, provenance, run_summary, sign_flip_test, train_all)
from albert_edu.model import AlbertForPreTraining
from albert_edu.stats import welch
from albert_edu.training import TrainingConfig, predict

# Two sizes of the same grid. "book" fits chapter 11's time budget (one seed, three E's, 120 steps). "full" is the
# grid the chapter reads (`albert-edu ablations --recipe full`, data/results/ablations-full.json): three seeds of
# every cell, 1,400 steps of 32 x 64 pieces each (about 2.9M pieces).
ABLATION_RECIPES = {
    "book": {"steps": 120, "seeds": (0,), "embedding_sizes": (16, 64, 128), "evaluations": 0, "save_every": 0},
    "full": {"steps": 1400, "seeds": (0, 1, 2), "embedding_sizes": (16, 32, 64, 128), "evaluations": 3,
             "save_every": 250},
}
ABLATION_LENGTH = 64  # T: half of chapter 8's, so that the grid's 36 runs fit in two hours on 2 cores
STRATEGY_E = 64  # the E of Table 4's grid and of section 4.8's runs: chapter 8's experiment model
DROPOUT = 0.1  # BERT's dropout, on hidden states and attention probabilities, for section 4.8's comparison
# Table 6's ALBERT-style model: twice as wide as the experiment model and all-shared (the xxlarge idea scaled
# down: xxlarge is 4 times as wide as BERT-large and half as deep; this one keeps the depth). Its step costs
# WIDE_STEP_COST times a BERT-style step (measured on 2 cores, one thread per run as train_all runs them, batches
# of 32 x 64, medians of interleaved steps; section 11.6 measures it again), so it gets that many times fewer steps.
WIDE = {"hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024}
WIDE_STEP_COST = 3.1


def check_ablation_recipe(recipe: str) -> dict:
    if recipe not in ABLATION_RECIPES:
        raise ValueError(f"recipe={recipe!r}: expected one of {sorted(ABLATION_RECIPES)}")
    return ABLATION_RECIPES[recipe]


def ablation_training(recipe: str, seed: int, steps: int | None = None) -> TrainingConfig:
    """How every run of the grid trains: MLM + SOP as ALBERT, on chapter 6's neutral pairs (whose lengths carry no
    order cue), LAMB at chapter 8's swept rate, warm-up over the first 1/15 of the steps."""
    settings = check_ablation_recipe(recipe)
    steps = steps or settings["steps"]
    evaluations = settings["evaluations"]
    return TrainingConfig(objective="sop", steps=steps, batch_size=32, max_seq_len=ABLATION_LENGTH, seed=seed,
                          lr=5e-3, warmup_steps=steps // 15, log_every=10, pairs="neutral",
                          eval_every=steps // evaluations if evaluations else 0, save_every=settings["save_every"])


def ablation_model(embedding_size: int = STRATEGY_E, sharing: str = "all", dropout: float = 0.0,
                   wide: bool = False) -> AlbertConfig:
    """Chapter 8's experiment model (V = 8000, H = 128, L = 6) with E, the sharing strategy and dropout as given,
    or Table 6's wide variant."""
    return replace(experiment_model(sharing), embedding_size=embedding_size, hidden_dropout_prob=dropout,
                   attention_probs_dropout_prob=dropout, **(WIDE if wide else {}))


def ablation_runs(recipe: str = "book") -> dict[str, dict[str, list[Run]]]:
    """The grid, per table and per cell, each cell a list of runs (one per seed). A run that serves several
    tables (the all-shared E = 64 model is in Tables 3 and 4 and section 4.8) is the same Run, trained once."""
    settings = check_ablation_recipe(recipe)
    seeds, steps = settings["seeds"], settings["steps"]

    def cell(name, model, steps=steps):
        return [Run(f"ablation-{name}-s{seed}-{recipe}", model, ablation_training(recipe, seed, steps)) for seed in seeds]

    table3 = {f"{sharing} E={e}": cell(f"{sharing}-E{e}", ablation_model(e, sharing))
              for sharing in ("all", "none") for e in settings["embedding_sizes"]}
    table4 = {sharing: table3.get(f"{sharing} E={STRATEGY_E}") or cell(f"{sharing}-E{STRATEGY_E}",
                                                                         ablation_model(STRATEGY_E, sharing))
              for sharing in ("all", "attention", "ffn", "none")}
    bert = table3.get("none E=128") or cell("none-E128", ablation_model(128, "none"))
    return {"table3": table3, "table4": table4,
            "dropout": {"off": table4["all"], "on": cell(f"all-E{STRATEGY_E}-dropout",
                                                         ablation_model(STRATEGY_E, "all", DROPOUT))},
            "table6": {"BERT-style": bert,
                       "ALBERT-style wide": cell("wide", ablation_model(STRATEGY_E, "all", wide=True),
                                                 round(steps / WIDE_STEP_COST))}}


def unique_runs(grid: dict) -> list[Run]:
    """Every run of a grid once, in order of first appearance."""
    out = {}
    for table in grid.values():
        for runs in table.values():
            for run in runs:
                out.setdefault(run.name, run)
    return list(out.values())


@torch.no_grad()
def depth_scores(path: Path, depths: tuple[int, ...], data_dir: Path = DATA_DIR, passes: int = 1) -> dict:
    """A trained all-shared model's held-out MLM loss and accuracy when its one layer is applied `depth` times,
    for each depth (its trained depth among them): the same weights, unrolled more or fewer times. With per
    document sums, as score's, for intervals. It reads `passes` passes of the held-out examples (score reads four),
    so at the trained depth it gives a loss close to the run's own, not equal to it."""
    model = AlbertForPreTraining.from_pretrained(path)
    if model.config.sharing != "all" or model.config.num_hidden_groups != 1:
        raise ValueError(f"{path} has sharing={model.config.sharing!r} in {model.config.num_hidden_groups} group(s): "
                         f"only a model whose layers all share one set of weights can be unrolled to another depth")
    examples = held_out_examples(data_dir, ABLATION_LENGTH, passes, "neutral")["sop"]
    documents = sorted({e.document for e in examples})
    out = {"documents": documents, "count": [sum(len(e.mlm_positions) for e in examples if e.document == d)
                                             for d in documents]}
    for depth in depths:
        deeper = AlbertForPreTraining(replace(model.config, num_hidden_layers=depth))
        deeper.load_state_dict(model.state_dict())  # one shared layer: the weights do not depend on the depth
        seen = predict(deeper, examples)
        right, loss = dict.fromkeys(documents, 0), dict.fromkeys(documents, 0.0)
        for e, r, l in zip(examples, seen["mlm_right_each"], seen["mlm_loss_each"]):
            right[e.document] += r
            loss[e.document] += l
        out[str(depth)] = {"mlm_loss": seen["mlm_loss_sum"] / seen["mlm_total"],
                           "mlm_accuracy": seen["mlm_right"] / seen["mlm_total"],
                           "right": [right[d] for d in documents], "loss": [round(loss[d], 4) for d in documents]}
    return out


DEPTHS = (1, 2, 3, 4, 6, 8, 12, 24)


def ablation_results(recipe: str = "book", runs_dir: Path = RUNS_DIR, data_dir: Path = DATA_DIR,
                     workers: int = 2, depths: tuple[int, ...] = DEPTHS) -> dict:
    """The grid trained now or taken from the run cache: a summary of every run (run_summary: scores, per-document
    MLM sums, learning curve, time), the cells as lists of run names, the all-shared E = 64 runs unrolled to
    `depths`, and how the file was made (command, machine, minutes)."""
    started = time.perf_counter()
    grid = ablation_runs(recipe)
    runs = unique_runs(grid)
    paths = dict(zip([r.name for r in runs], train_all(runs, runs_dir, data_dir, workers)))
    summaries = {name: run_summary(path) for name, path in paths.items()}
    depth = {run.name: depth_scores(paths[run.name], depths, data_dir) for run in grid["table4"]["all"]}
    return {**provenance(recipe, workers, list(summaries.values()), started),
            "command": f"albert-edu ablations --recipe {recipe}",
            "cells": {table: {cell: [r.name for r in rs] for cell, rs in cells.items()} for table, cells in grid.items()},
            "runs": summaries, "depths": depth}


# Table 6 at 5e-3, the rate chapter 8's sweep chose for the H = 128 experiment model, left the wide model at the
# unigram loss with its training loss flat from step 100: a stalled optimizer, not a verdict. So each side of
# Table 6 gets its own rate: seed 0 of each at every rate of TABLE6_RATES with the full recipe's budget, the lowest
# held-out MLM loss deciding, then the other seeds at the chosen rate (`albert-edu ablations --recipe table6-rates`).
TABLE6_RATES = (1e-3, 2e-3, 5e-3, 1e-2)
TABLE6_FILE = "ablations-table6-rates.json"  # in experiments.RESULTS_DIR


def table6_run(side: str, lr: float, seed: int) -> Run:
    """One side of Table 6 ("BERT-style" or "ALBERT-style wide") as the full grid trains it, at LAMB rate `lr`:
    the grid's own run at its rate, otherwise the same run with the rate changed and named for it."""
    run = ablation_runs("full")["table6"][side][seed]
    if lr == run.training.lr:
        return run
    tag = "bert" if side == "BERT-style" else "wide"
    return Run(f"ablation-table6-{tag}-lr{lr:g}-s{seed}-full", run.model, replace(run.training, lr=lr))


def grid_runs(recipe: str) -> dict[str, Run]:
    """Every run that a results file of `recipe` may hold, by name: the grid's ("book", "full"), or for
    "table6-rates" each side of Table 6 at every rate and seed (the file holds those it trained)."""
    if recipe == "table6-rates":
        seeds = check_ablation_recipe("full")["seeds"]
        runs = [table6_run(side, lr, seed) for side in ("BERT-style", "ALBERT-style wide") for lr in TABLE6_RATES
                for seed in seeds]
        return {run.name: run for run in runs}
    return {run.name: run for run in unique_runs(ablation_runs(recipe))}


def table6_rate_results(runs_dir: Path = RUNS_DIR, data_dir: Path = DATA_DIR, workers: int = 2,
                        rates: tuple[float, ...] = TABLE6_RATES) -> dict:
    """Table 6 with a rate swept for each side: every rate's seed-0 run (trained now or taken from the run cache),
    each side's rate with the lowest held-out MLM loss, that rate's runs for every seed of the full recipe, and a
    summary of every run (run_summary), with the cells as compare reads them."""
    started, sides = time.perf_counter(), ("BERT-style", "ALBERT-style wide")
    sweep = {side: {lr: table6_run(side, lr, 0) for lr in rates} for side in sides}
    swept = [run for side in sides for run in sweep[side].values()]
    summaries = {run.name: run_summary(path) for run, path in zip(swept, train_all(swept, runs_dir, data_dir, workers))}
    chosen = {side: min(rates, key=lambda lr: summaries[sweep[side][lr].name]["scores"]["mlm_loss"]) for side in sides}
    seeds = check_ablation_recipe("full")["seeds"]
    cells = {side: [table6_run(side, chosen[side], seed) for seed in seeds] for side in sides}
    more = [run for runs in cells.values() for run in runs if run.name not in summaries]
    summaries |= {run.name: run_summary(path) for run, path in zip(more, train_all(more, runs_dir, data_dir, workers))}
    return {**provenance("table6-rates", workers, list(summaries.values()), started),
            "command": "albert-edu ablations --recipe table6-rates", "rates": list(rates),
            "sweep": {side: {f"{lr:g}": run.name for lr, run in runs.items()} for side, runs in sweep.items()},
            "chosen": chosen, "cells": {"table6": {side: [run.name for run in runs] for side, runs in cells.items()}},
            "runs": summaries}


def cell_documents(results: dict, runs: list[str]) -> dict:
    """The held-out MLM sums of a cell's runs per document: `loss` and `right` (seeds x documents), `count`
    (documents; the same masked pieces for every run, since all are scored on the same held-out examples)."""
    by = [results["runs"][name]["predictions"]["mlm_by_document"] for name in runs]
    if any(b["documents"] != by[0]["documents"] or b["count"] != by[0]["count"] for b in by):
        raise ValueError(f"runs {runs} were scored on different held-out pieces: expected one scoring for a grid")
    return {"documents": by[0]["documents"], "count": np.array(by[0]["count"], dtype=float),
            "loss": np.array([b["loss"] for b in by]), "right": np.array([b["right"] for b in by], dtype=float)}


def side_losses(found: dict, side: dict, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A side of a comparison, {(table, cell): coefficient, ...}, its cells' documents in `found` (cell_documents
    of each): its held-out MLM loss per bootstrap row (documents resampled by `weights`), the coefficients applied
    to the cells' losses averaged over seeds; its loss per seed (the runs of each seed combined alike); and its
    summed loss per document, averaged over seeds, for the clustered test."""
    rows, seeds, documents = 0.0, 0.0, 0.0
    for cell, coefficient in side.items():
        d = found[cell]
        rows = rows + coefficient * (weights @ d["loss"].mean(0)) / (weights @ d["count"])
        seeds = seeds + coefficient * d["loss"].sum(1) / d["count"].sum()
        documents = documents + coefficient * d["loss"].mean(0)
    return rows, seeds, documents



def compare(results: dict, worse: dict, better: dict, draws: int = 2000) -> dict:
    """How much higher `worse`'s held-out MLM loss is than `better`'s (sides as side_losses takes them), judged
    against both sources of chance (Appendix A). Documents: the difference's 95% interval over resampled documents
    (the same draws for both sides: a paired interval) and the sign-flip test's p-value on d_k, the summed loss of
    one side minus the other's in document k (losses are real numbers, not right-or-wrong answers). Seeds: Welch's t-test and interval on the per-seed losses,
    and whether every seed of `worse` scores above every seed of `better`. `p` is the larger p-value: a
    difference must stand out from both."""
    found = {(t, c): cell_documents(results, results["cells"][t][c]) for side in (worse, better) for t, c in side}
    first = next(iter(found.values()))
    if any(f["documents"] != first["documents"] or not np.array_equal(f["count"], first["count"]) for f in found.values()):
        raise ValueError(f"cells {list(found)} were scored on different held-out pieces: expected one scoring for a grid")
    documents = first["documents"]
    weights = bootstrap_weights(documents, draws)
    a, a_seeds, a_documents = side_losses(found, worse, weights)
    b, b_seeds, b_documents = side_losses(found, better, weights)
    _, p_documents = sign_flip_test(a_documents - b_documents, documents)
    p_seeds, seed_interval = welch(a_seeds, b_seeds) if min(len(a_seeds), len(b_seeds)) > 1 else (1.0, (np.nan, np.nan))
    return {"difference": float(a[0] - b[0]), "interval": interval(a - b), "p_documents": p_documents,
            "seed_interval": seed_interval, "p_seeds": p_seeds, "p": max(p_documents, p_seeds),
            "seeds": (a_seeds - b_seeds).round(4).tolist(), "ordered": bool(a_seeds.min() > b_seeds.max())}


def cell_scores(results: dict, table: str, cell: str, draws: int = 2000) -> dict:
    """One cell's held-out MLM loss and accuracy (pooled over its pieces, averaged over seeds) with 95% intervals
    over resampled documents, its per-seed losses, and its SOP balanced accuracy averaged over seeds."""
    d = cell_documents(results, results["cells"][table][cell])
    weights = bootstrap_weights(d["documents"], draws)
    loss = (weights @ d["loss"].mean(0)) / (weights @ d["count"])
    accuracy = (weights @ d["right"].mean(0)) / (weights @ d["count"])
    runs = [results["runs"][name] for name in results["cells"][table][cell]]
    return {"loss": float(loss[0]), "loss_interval": interval(loss), "accuracy": float(accuracy[0]),
            "accuracy_interval": interval(accuracy), "seed_losses": (d["loss"].sum(1) / d["count"].sum()).tolist(),
            "sop_balanced": float(np.mean([r["scores"]["sop_balanced"] for r in runs]))}


def plan(recipe: str = "full") -> dict[str, tuple[dict, dict]]:
    """The comparisons that decide what reproduced, fixed before the full grid's results existed: per finding of
    the paper, (worse, better) as compare takes them, the paper's direction being worse's loss above better's.
    "Middle E" is the mean of the all-shared cells strictly between the smallest and the largest E."""
    sizes = check_ablation_recipe(recipe)["embedding_sizes"]
    middle = {("table3", f"all E={e}"): 1 / (len(sizes) - 2) for e in sizes[1:-1]}
    return {
        f"not shared: E = {sizes[-1]} beats E = {sizes[0]}": ({("table3", f"none E={sizes[0]}"): 1},
                                                               {("table3", f"none E={sizes[-1]}"): 1}),
        f"all shared: middle E beats E = {sizes[0]}": ({("table3", f"all E={sizes[0]}"): 1}, middle),
        f"all shared: middle E beats E = {sizes[-1]}": ({("table3", f"all E={sizes[-1]}"): 1}, middle),
        "sharing the FFN costs more than sharing attention": ({("table4", "ffn"): 1}, {("table4", "attention"): 1}),
        "sharing everything costs quality": ({("table4", "all"): 1}, {("table4", "none"): 1}),
        "wide and shared beats BERT-style in equal time": ({("table6", "BERT-style"): 1},
                                                           {("table6", "ALBERT-style wide"): 1}),
        "removing dropout helps": ({("dropout", "on"): 1}, {("dropout", "off"): 1}),
    }


def read_plan(results: dict, draws: int = 2000) -> dict[str, dict]:
    """compare for every planned comparison, with Holm's adjustment of their p (the larger of the documents' and
    the seeds' p-values) over all of them; a finding is reproduced when its difference points the paper's way, its
    adjusted p is below 0.05 and every seed is ordered (with at least 3 seeds a side; otherwise None: not judged)."""
    out = {name: compare(results, worse, better, draws) for name, (worse, better) in plan(results["recipe"]).items()}
    adjusted = holm({name: r["p"] for name, r in out.items()})
    enough = len(check_ablation_recipe(results["recipe"])["seeds"]) >= 3
    for name, r in out.items():
        r["holm"] = adjusted[name]
        # with fewer than 3 seeds a side, ordered seeds are no evidence: not judged (None)
        r["reproduced"] = (r["difference"] > 0 and r["holm"] < 0.05 and r["ordered"]) if enough else None
    return out
