"""The runs behind chapters 8-11's experiments, the plumbing that chapter 8 points to: the experiments' model; the
recipes (how many steps and seeds, which pairs, how long a trunk); the runs each recipe trains (Table 5's three
objectives, the diagnostic, the learning-rate sweep, chapter 9's Figure 1 pair); how a results file records where
it came from; a finished run in a few numbers; and B's document for every held-out pair, for the two-way bootstrap.
albert_edu.experiments re-exports every name, so `from albert_edu.experiments import table5_runs` works as before."""

import json
import os
import platform
import random
import time
from dataclasses import replace
from pathlib import Path

import torch

from albert_edu.config import AlbertConfig
from albert_edu.corpus import DATA_DIR, load_documents
from albert_edu.pretraining_data import mask_ngrams, segment_pairs
from albert_edu.run_cache import RUNS_DIR, Run, train_all
from albert_edu.tokenizer import Tokenizer
from albert_edu.training import TrainingConfig


def load_result(path: Path) -> dict:
    return json.loads((Path(path) / "result.json").read_text())


# The experiments' model: the tiny preset made narrower (H = 128, A = 2, F = 512), so that a run of a few thousand
# steps takes about an hour on one CPU core: 0.77M parameters shared ("all"), 1.76M not shared ("none"), counting
# the encoder and pooler as chapter 1 does.
def experiment_model(sharing: str = "all") -> AlbertConfig:
    return AlbertConfig.from_preset("tiny", hidden_size=128, num_attention_heads=2, intermediate_size=512,
                                    sharing=sharing)


# Sizes of the same experiment, each produced by `albert-edu experiment --recipe NAME`. "book" fits in the
# chapters' time budget. "pilot" is the first long version (from scratch at T = 64, two seeds), kept as a
# record (chapter 8's closing section). "full" follows the learning-rate sweep: T = 128, one MLM-only trunk of trunk_steps,
# continued with each objective for `steps` steps and three seeds (sections 8.4 and 8.5). "neutral" is "full"
# on pairs whose lengths and sources carry no label (chapter 6's "neutral" pairs; section 8.4 shows why). The long
# recipes save a checkpoint every `save_every` steps, so that a killed command resumes where it stopped.
RECIPES = {"book": {"steps": 200, "seeds": (0,), "evaluations": 0, "max_seq_len": 64, "trunk_steps": 0,
                    "pairs": "reference", "save_every": 0},
           "pilot": {"steps": 2500, "seeds": (0, 1), "evaluations": 6, "max_seq_len": 64, "trunk_steps": 0,
                     "pairs": "reference", "save_every": 0},
           "full": {"steps": 600, "seeds": (0, 1, 2), "evaluations": 4, "max_seq_len": 128, "trunk_steps": 3000,
                    "pairs": "reference", "save_every": 100},
           "neutral": {"steps": 600, "seeds": (0, 1, 2), "evaluations": 4, "max_seq_len": 128, "trunk_steps": 3000,
                       "pairs": "neutral", "save_every": 100},
           # For a GPU (README, "On a GPU"): twice as wide and deep (H = 256, L = 12), batches of 128, trunks of
           # 12,000 steps (about 16 times full's tokens), 2,000 continued steps and five seeds. Defined, not yet
           # run; its learning rate is full's, swept for the smaller model at batches of 32.
           "gpu": {"steps": 2000, "seeds": (0, 1, 2, 3, 4), "evaluations": 4, "max_seq_len": 128, "trunk_steps": 12000,
                   "pairs": "reference", "save_every": 500, "batch_size": 128,
                   "model": {"hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024,
                             "num_hidden_layers": 12}}}


def check_recipe(recipe: str) -> dict:
    if recipe not in RECIPES:
        raise ValueError(f"recipe={recipe!r}: expected one of {sorted(RECIPES)}")
    return RECIPES[recipe]


def recipe_training(recipe: str, objective: str, seed: int, steps: int | None = None,
                    mlm_weight: float = 1.0) -> TrainingConfig:
    """How every run of a recipe trains: LAMB at the sweep's best rate, warm-up over the first 1/15 of the steps."""
    settings = check_recipe(recipe)
    steps, evaluations = steps or settings["steps"], settings["evaluations"]
    return TrainingConfig(objective=objective, steps=steps, batch_size=settings.get("batch_size", 32),
                          max_seq_len=settings["max_seq_len"],
                          seed=seed, lr=5e-3, warmup_steps=steps // 15, log_every=10, mlm_weight=mlm_weight,
                          eval_every=steps // evaluations if evaluations else 0, pairs=settings["pairs"],
                          save_every=settings["save_every"])


def recipe_model(recipe: str, sharing: str = "all") -> AlbertConfig:
    """The experiments' model, or the larger one a recipe asks for (its "model" sizes)."""
    return replace(experiment_model(sharing), **check_recipe(recipe).get("model", {}))


def trunk_run(recipe: str, sharing: str = "all") -> Run | None:
    """The MLM-only run that the recipe's runs continue from, or None when they start from scratch."""
    steps = check_recipe(recipe)["trunk_steps"]
    if not steps:
        return None
    return Run(f"trunk-{recipe}" + ("" if sharing == "all" else "-unshared"), recipe_model(recipe, sharing),
               recipe_training(recipe, "none", 0, steps=steps))


# The learning-rate sweep behind the recipe: MLM-only runs of the experiments' model at T = 128, 600 steps each
# (about five passes over the training split), LAMB at six rates and AdamW at three as a check; the held-out MLM
# loss decides. `albert-edu experiment --recipe sweep` trains them and writes data/results/sweep.json.
SWEEP = {"steps": 600, "max_seq_len": 128, "evaluations": 4,
         "lr": {"lamb": (1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 4e-2), "adamw": (3e-4, 1e-3, 3e-3)}}


def sweep_runs() -> list[Run]:
    steps = SWEEP["steps"]
    return [Run(f"sweep-{optimizer}-{lr:g}", experiment_model("all"),
                TrainingConfig(objective="none", steps=steps, batch_size=32, max_seq_len=SWEEP["max_seq_len"],
                               lr=lr, optimizer=optimizer, warmup_steps=steps // 15,
                               eval_every=steps // SWEEP["evaluations"], log_every=10))
            for optimizer, rates in SWEEP["lr"].items() for lr in rates]


def table5_runs(recipe: str = "book") -> list[Run]:
    """Three objectives x the recipe's seeds, one model geometry (and one trunk), everything else equal."""
    return [Run(f"{objective}-s{seed}-{recipe}", recipe_model(recipe), recipe_training(recipe, objective, seed),
                trunk_run(recipe)) for objective in ("none", "nsp", "sop") for seed in check_recipe(recipe)["seeds"]]


def diagnostic_runs(recipe: str = "full") -> list[Run]:
    """The SOP loss alone (MLM weight 0) from the trunk, one seed, the whole model trained: meant to show how far
    order can be learned at all (chapter 8's closing section shows why it does not: the encoder drifts and forgets MLM). Only
    for recipes with a trunk."""
    if trunk_run(recipe) is None:
        return []
    return [Run(f"sop-only-s0-{recipe}", recipe_model(recipe), recipe_training(recipe, "sop", 0, mlm_weight=0.0),
                trunk_run(recipe))]


def figure1_runs(recipe: str = "book", seed: int = 0) -> dict[str, Run]:
    """BERT-style (nothing shared) and ALBERT-style (all shared) models of one geometry, trained alike with SOP
    (each from its own trunk, if the recipe has trunks). The ALBERT-style run is table5_runs' SOP run of the
    same seed, so the cache trains it once for both chapters."""
    return {style: Run(f"sop-s{seed}-{recipe}" + ("" if sharing == "all" else "-unshared"), recipe_model(recipe, sharing),
                       recipe_training(recipe, "sop", seed), trunk_run(recipe, sharing))
            for style, sharing in (("BERT-style", "none"), ("ALBERT-style", "all"))}


def provenance(recipe: str, workers: int, summaries: list[dict], started: float, device: str = "cpu") -> dict:
    """How a results file was made: the command, the machine, and the time (each run's own training time
    summed, and this call's, which is shorter when runs came from the cache)."""
    return {"recipe": recipe, "command": f"albert-edu experiment --recipe {recipe}" + (
                f" --device {device.split(':')[0]}" if device != "cpu" else ""),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores" + (
                f", {torch.cuda.get_device_name(device)}" if device != "cpu" else ""), "workers": workers,
            "training_minutes": round(sum(s["seconds"] for s in summaries) / 60, 1),
            "minutes": round((time.perf_counter() - started) / 60, 1)}


def sweep_results(runs_dir: Path = RUNS_DIR, data_dir: Path = DATA_DIR, workers: int = 2, device: str = "cpu") -> dict:
    """The sweep's runs, trained now or taken from the cache, one summary each, and how they were made."""
    started = time.perf_counter()
    summaries = [run_summary(path) for path in train_all(sweep_runs(), runs_dir, data_dir, workers, device)]
    return {**provenance("sweep", workers, summaries, started, device), "runs": summaries}


def run_summary(path: Path, loss_every: int = 50) -> dict:
    """A finished run in a few numbers: its result.json, its held-out evaluations during training (with the
    passes over the training split taken by then, "epochs"), and its training loss every `loss_every` steps
    (from log.jsonl)."""
    records = [json.loads(line) for line in (Path(path) / "log.jsonl").read_text().splitlines()]
    steps = {r["step"]: r for r in records if "loss" in r}
    last = steps[max(steps)]
    return {**load_result(path), "tokens_per_s": last["tokens_per_s"], "epochs": last.get("epochs"),
            "evaluations": [{"step": r["step"], "epochs": steps.get(r["step"], {}).get("epochs"), **r["eval"]}
                            for r in records if "eval" in r],
            "loss": [[r["step"], r["loss"]] for r in records if "loss" in r and r["step"] % loss_every == 0]}


def second_documents(data_dir: Path = DATA_DIR, max_seq_len: int = 64, passes: int = 4, pairs: str = "reference") -> dict:
    """B's document for every scored pair, in score's order (an Example records only A's): the example-creation
    passes of held_out_examples replayed, drawing from the same random stream as create_examples and
    validation_examples, with segment_pairs reporting its sources. Per task, (A's documents, B's documents)."""
    tokenizer = Tokenizer.load(Path(data_dir) / "tokenizer")
    tokenized = [tokenizer.encode_batch(d.sentences) for d in load_documents("validation", Path(data_dir))]
    out = {"sop": ([], []), "nsp": ([], [])}
    for seed in range(passes):
        for task in ("sop", "nsp"):
            rng, sources = random.Random(seed), []
            for a, b, _ in segment_pairs(tokenized, task, max_seq_len, rng, sources=sources, pairs=pairs):
                mask_ngrams(tokenizer.encode_pair(a, b)[0], tokenizer, rng)  # the draws create_examples makes
            random.Random(seed).shuffle(sources)  # as validation_examples shuffles the examples
            out[task][0].extend(source[0] for source in sources)
            out[task][1].extend(source[2] for source in sources)
    return out
