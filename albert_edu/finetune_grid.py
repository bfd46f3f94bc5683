"""Chapter 10's fine-tuning grids, the plumbing behind `albert-edu finetune --recipe NAME`: every fine-tuning of a
grid (contender x seed x fold for sentiment, contender x seed for the continuation task) runs in a worker process
on one thread, so that its numbers do not depend on the machine's cores; the results are cached by a fingerprint
of the encoders, the settings, the code and the data; each finished fine-tuning is kept until the grid is complete,
so that a killed grid resumes where it stopped. What is fine-tuned, and how, is chapter 10's (albert_edu.downstream);
this module only schedules, caches and collects it. The chapter reads the committed results
(data/results/finetune-*.json); the tests re-run one cell of the grid to check them."""

import json
import os
import platform
import random
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch

from albert_edu.config import AlbertConfig
from albert_edu.corpus import DATA_DIR, write_atomically
from albert_edu.downstream import (POLARITY_FILE, FinetuneConfig, choice_logits, classifier_from, continuation_items,
                                   fit, fold_indices, overlap_scores, predict_classes, predict_logits, read_polarity,
                                   stratified_folds)
from albert_edu.finetune_recipes import CONTENDERS, FINETUNE_RECIPES, check_finetune_recipe, sentiment_fold
from albert_edu.tokenizer import Tokenizer


def sentiment_unit(start, model_config: AlbertConfig, seed: int, fold: int, folds: int, settings: dict) -> dict:
    """One cell of the sentiment grid: P(positive) for the items of `fold` (in file order) from a classifier
    fine-tuned on the other folds, and its accuracy on those training folds (has it fitted what it saw?)."""
    model, rows, labels, train, test = sentiment_fold(start, seed, fold, folds, settings, model_config)
    fitted = predict_classes(model, [rows[i] for i in train])
    return {"test": [p[1] for p in predict_classes(model, [rows[i] for i in test])],
            "train_accuracy": sum((p[1] > 0.5) == labels[i] for p, i in zip(fitted, train)) / len(train)}


_CONTINUATION_DATA = {}  # one worker runs many cells on the same items: build them once per process


def continuation_data(settings: dict, distractors: str) -> tuple[list[dict], list[dict]]:
    """The continuation task's training items (from the training documents) and evaluation items (held out). With
    settings["corpus"] "large", both come from chapter 2's large corpus, read with its tokenizer, the training items
    from settings["train_documents"] of its training documents drawn at random (seed 0) from every source (all of
    them would take minutes to encode; the split lists its sources one after another)."""
    from albert_edu.corpus import load_documents
    from albert_edu.sources import LARGE_DIR

    key = json.dumps([settings, distractors], sort_keys=True)
    if key not in _CONTINUATION_DATA:
        corpus = settings.get("corpus", "book")
        if corpus not in ("book", "large"):
            raise ValueError(f"corpus={corpus!r}: expected 'book' (chapter 2's corpus) or 'large'")
        data_dir = LARGE_DIR if corpus == "large" else DATA_DIR
        tokenizer = Tokenizer.load(data_dir / "tokenizer")
        common = dict(candidates=settings["candidates"], distractors=distractors, max_seq_len=settings["max_seq_len"],
                      window=settings["window"], per_document=settings["per_document"])
        train = load_documents("train", data_dir)
        if settings.get("train_documents"):
            train = [train[i] for i in sorted(random.Random(0).sample(range(len(train)), settings["train_documents"]))]
        _CONTINUATION_DATA[key] = (
            continuation_items(train, tokenizer, seed=1, limit=settings["train_items"], **common),
            continuation_items(load_documents("validation", data_dir), tokenizer, seed=2, limit=settings["eval_items"],
                               **common))
    return _CONTINUATION_DATA[key]


def continuation_unit(start, model_config: AlbertConfig, seed: int, distractors: str, settings: dict) -> list[list[float]]:
    """One cell of the continuation grid: fine-tune a one-output scorer on the training items, return each held-out
    item's logits over its candidates."""
    train, test = continuation_data(settings, distractors)
    config = FinetuneConfig(seed=seed, **{k: settings[k] for k in ("epochs", "batch_size", "lr", "max_seq_len")})
    model = classifier_from(start, 1, seed, model_config)
    fit(model, train, [item["answer"] for item in train], config, choice_logits)
    return predict_logits(model, test, choice_logits, batch_size=16)


def _unit(job: tuple) -> dict:
    """What a worker process of run_units runs, on one thread: the job's output and how long it took."""
    import time

    torch.set_num_threads(1)
    began, (kind, kwargs) = time.perf_counter(), job
    output = {"sentiment": sentiment_unit, "continuation": continuation_unit}[kind](**kwargs)
    return {"output": output, "seconds": round(time.perf_counter() - began, 2)}


def run_units(jobs: list[tuple], workers: int = 2, progress: bool = False, keep: Path | None = None) -> list[dict]:
    """Every job in fresh processes, `workers` at a time, each on one thread (so the answers do not depend on
    how many cores the machine has); each job's {"output", "seconds"}, in the order of `jobs`. With `keep`, a
    directory, each finished job is saved there as it ends, and jobs found there are not run again: a killed grid
    resumes where it stopped."""
    from concurrent.futures import as_completed

    from tqdm.auto import tqdm

    saved = {} if keep is None else {i: Path(keep) / f"{i}.json" for i in range(len(jobs))}
    done = {i: json.loads(path.read_text()) for i, path in saved.items() if path.is_file()}
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool, \
            tqdm(total=len(jobs), initial=len(done), desc="fine-tuning", disable=not progress) as bar:
        running = {pool.submit(_unit, job): i for i, job in enumerate(jobs) if i not in done}
        for future in as_completed(running):
            i = running[future]
            done[i] = future.result()
            if keep is not None:
                write_atomically(saved[i], json.dumps(done[i]).encode())
            bar.update()
    return [done[i] for i in range(len(jobs))]
def bow_sentiment(texts: list[str], labels: list[int], folds: int) -> list[float]:
    """The bag-of-words baseline on the same folds: logistic regression (scikit-learn, L2, C = 1) on which words a
    sentence contains; P(positive) for every sentence, each from the model that did not see its fold."""
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    fold_of, out = stratified_folds(labels, folds), [0.0] * len(texts)
    for fold in range(folds):
        train, test = fold_indices(fold_of, fold)
        words = CountVectorizer(binary=True, token_pattern=r"[a-z]+(?:'[a-z]+)?")
        x = words.fit_transform([texts[i] for i in train])
        classifier = LogisticRegression(C=1.0, max_iter=2000).fit(x, [labels[i] for i in train])
        for i, p in zip(test, classifier.predict_proba(words.transform([texts[i] for i in test]))[:, 1]):
            out[i] = float(p)
    return out


def pretrained_starts(recipe: str, workers: int = 2) -> dict[str, list]:
    """For each contender, its encoder's starting point for each pre-training seed: a run directory of chapter 8's
    runs (trained now if the cache lacks them), or None for from scratch."""
    from albert_edu.experiments import check_recipe, table5_runs, train_all

    pretraining = check_finetune_recipe(recipe)["pretraining"]
    runs = table5_runs(pretraining)
    paths = dict(zip([r.name for r in runs], train_all(runs, workers=workers)))
    seeds = check_recipe(pretraining)["seeds"]
    starts = {"from scratch": [None] * len(seeds)}
    for contender, objective in zip(CONTENDERS[1:], ("none", "nsp", "sop")):
        starts[contender] = [str(paths[f"{objective}-s{s}-{pretraining}"]) for s in seeds]
    return starts


def finetune_key(recipe: str, starts: dict) -> str:
    """A fingerprint of what decides the grid's results: its settings, the pre-trained runs it starts from (their
    directory names carry their keys), the source of this module and of every module it imports (chapter 10's
    downstream, the model and the tokenizer among them, found as chapter 8's code_files finds them), and the data: the labelled sentences,
    both splits and the tokenizer."""
    import hashlib

    from albert_edu.experiments import code_files

    digest = hashlib.sha256(json.dumps({"recipe": FINETUNE_RECIPES[recipe],
                                        "starts": {k: [v and Path(v).name for v in vs] for k, vs in starts.items()}},
                                       sort_keys=True).encode())
    package = Path(__file__).parent
    for path in [package / name for name in code_files("finetune_grid")] + [
            DATA_DIR / "raw" / POLARITY_FILE, DATA_DIR / "prepared" / "train.jsonl",
            DATA_DIR / "prepared" / "validation.jsonl", DATA_DIR / "tokenizer" / "spiece.model"]:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def _stored(value: float) -> float:
    """A prediction as the results file keeps it: 9 significant digits, more than a float32 holds, so that two
    logits that differ are stored different (ties in the file are ties of the model)."""
    return float(f"{value:.9g}")


def finetune_results(recipe: str = "book", workers: int = 2, runs_dir: Path | None = None,
                     progress: bool = False) -> dict:
    """The fine-tuning grid of `recipe`: every contender x seed x fold on sentiment, every contender x seed on
    the continuation task with both kinds of distractors; per-item predictions of each (P(positive) for sentiment,
    the candidates' logits for continuation), the baselines', the labels and what the items are.
    Cached in the run cache by finetune_key (a re-run reads it back); each finished cell is kept until the grid is
    complete, so a killed run resumes."""
    import shutil
    import time

    from albert_edu.experiments import RUNS_DIR, recipe_model

    settings = check_finetune_recipe(recipe)
    starts = pretrained_starts(recipe, workers)
    runs_dir = Path(runs_dir or RUNS_DIR)
    name = f"finetune-{recipe}-{finetune_key(recipe, starts)}"
    if (runs_dir / f"{name}.json").is_file():
        return json.loads((runs_dir / f"{name}.json").read_text())
    began, keep = time.time(), runs_dir / f".{name}.partial"
    keep.mkdir(parents=True, exist_ok=True)
    model_config = recipe_model(settings["pretraining"])
    seeds, folds = settings["seeds"], settings["folds"]

    def start_of(contender, seed):
        return starts[contender][seed % len(starts[contender])]

    jobs = [("sentiment", dict(start=start_of(c, s), model_config=model_config, seed=s, fold=f, folds=folds,
                               settings=settings["sentiment"])) for c in CONTENDERS for s in seeds for f in range(folds)]
    jobs += [("continuation", dict(start=start_of(c, s), model_config=model_config, seed=s, distractors=d,
                                   settings=settings["continuation"]))
             for d in ("other", "same") for c in CONTENDERS for s in seeds]
    units = run_units(jobs, workers, progress, keep)
    seconds = {kind: [u["seconds"] for (k, _), u in zip(jobs, units) if k == kind] for kind in ("sentiment", "continuation")}
    outputs = iter(u["output"] for u in units)
    texts, labels = read_polarity()
    fold_of = stratified_folds(labels, folds)
    sentiment = {"labels": labels, "folds": fold_of, "bag of words": [_stored(p) for p in bow_sentiment(texts, labels, folds)]}
    sentiment["train accuracy"] = {}
    for c in CONTENDERS:
        sentiment[c], sentiment["train accuracy"][c] = [], []
        for s in seeds:
            p, fitted = [0.0] * len(texts), []
            for f in range(folds):
                unit = next(outputs)
                for i, q in zip(fold_indices(fold_of, f)[1], unit["test"]):
                    p[i] = _stored(q)
                fitted.append(round(unit["train_accuracy"], 6))
            sentiment[c].append(p)
            sentiment["train accuracy"][c].append(fitted)
    continuation = {}
    for d in ("other", "same"):
        _, test = continuation_data(settings["continuation"], d)
        continuation[d] = {"documents": [t["document"] for t in test], "sources": [t["sources"] for t in test],
                           "answers": [t["answer"] for t in test], "overlap": overlap_scores(test)}
        for c in CONTENDERS:
            continuation[d][c] = [[[_stored(q) for q in logits] for logits in next(outputs)] for _ in seeds]
    results = {"recipe": recipe, "command": f"albert-edu finetune --recipe {recipe}",
               "machine": f"{platform.machine()}, {os.cpu_count()} cores", "workers": workers,
               "starts": {k: [v and Path(v).name for v in vs] for k, vs in starts.items()},
               "seeds": list(seeds), "sentiment": sentiment, "continuation": continuation,
               "cell_seconds": {kind: {"cells": len(s), "median": float(np.median(s)), "total": round(sum(s), 1)}
                                for kind, s in seconds.items()},
               "cell_minutes": round(sum(sum(s) for s in seconds.values()) / 60, 1),
               "minutes": round((time.time() - began) / 60, 1)}
    write_atomically(runs_dir / f"{name}.json", (json.dumps(results) + "\n").encode())
    shutil.rmtree(keep)
    return results
