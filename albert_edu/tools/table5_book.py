"""Table 5 on the book's pre-trained ALBERT (chapter 8, section 8.7): the MLM-only model of chapter 7, section 7.8
(the first recipe's, data/checkpoints/albert-book-1800) continued for STEPS steps with each objective (MLM only, MLM + NSP, MLM + SOP) and
three seeds, on the large corpus cut into neutral pairs (chapter 6: lengths carry no label), at the rate the
sweep chose for this geometry and batch (data/results/sweep-large-recipe.json). Every run is then asked the same
held-out pairs, neutral and reference, and its answers are stored, so that every figure of the section can be
recomputed from data/results/table5-book.json without the weights (9 runs of 8 MB each are not committed).

    python -m albert_edu.tools.table5_book                # trains what is missing (resumable), then collects
    python -m albert_edu.tools.table5_book --shard 0/2    # one of two processes sharing the runs (one thread each)
    python -m albert_edu.tools.table5_book --collect      # only writes the results file from finished runs
    python -m albert_edu.tools.table5_book --start albert-book   # the same from the 6,000-step model -> table5-book-6000.json
    python -m albert_edu.tools.table5_book --start albert-book --steps 2000 --device cuda   # longer continuations
        (warm-up and checkpoints a tenth of the steps) on a GPU, in fp32 -> table5-book-6000-2000steps.json
    python -m albert_edu.tools.table5_book --start albert-book --probe   # no training: linear probes of the frozen
        checkpoint (is order, is topic, in its encoder before any pair loss?) -> table5-book-6000-probe.json

A run trains in a partial folder, saving every SAVE_EVERY steps, and resumes from there after a kill; its folder
is renamed complete only after it is scored. The folder's name carries a fingerprint of the settings, the data,
the training code and the starting weights, so a change to any of them trains anew."""

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import time
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

from albert_edu.tools.manifest import ROOT

STEPS, BATCH, LR, OPTIMIZER, WARMUP, SAVE_EVERY = 80, 128, 2e-3, "adamw", 8, 20
SEEDS, OBJECTIVES, TRAIN_PAIRS = (0, 1, 2), ("none", "nsp", "sop"), "neutral"
HELD_OUT = 2048  # held-out pairs per task and cutting, drawn from all held-out documents (seed 4321)
PROBE_PAIRS, PROBE_SHARE = 4096, 0.15  # a probe's training pairs per task and seed, from this share of the documents
MAX_SEQ_LEN = 128
RESULTS = ROOT / "data" / "results" / "table5-book.json"
CHECKPOINTS = ROOT / "data" / "checkpoints"
STARTS = {"albert-book-1800": RESULTS,  # the first recipe's model, on the plateau (chapter 8, section 8.7 reads it)
          "albert-book": ROOT / "data" / "results" / "table5-book-6000.json"}  # the model that left it
COMMAND = "python -m albert_edu.tools.table5_book"


def schedule(steps: int = STEPS) -> tuple[int, int]:
    """(warm-up steps, steps between checkpoints) for continuations of `steps`: the committed recipe's for STEPS,
    a tenth of the steps each (at least SAVE_EVERY between checkpoints) for any other length."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 10:
        raise ValueError(f"steps={steps!r}: expected an integer of at least 10")
    return (WARMUP, SAVE_EVERY) if steps == STEPS else (steps // 10, max(SAVE_EVERY, steps // 10))


def results_path(start: str, steps: int = STEPS) -> Path:
    """The results file of the runs from the committed checkpoint `start` (a name in STARTS), `steps` long."""
    if start not in STARTS:
        raise ValueError(f"start={start!r}: expected one of {sorted(STARTS)}")
    schedule(steps)
    out = STARTS[start]
    return out if steps == STEPS else out.with_name(f"{out.stem}-{steps}steps.json")


def runs(steps: int = STEPS) -> list:
    """The nine runs: objective x seed, all from the book's ALBERT, everything else equal (`steps` long)."""
    from albert_edu.run_cache import Run
    from albert_edu.tools.book_model import model_config
    from albert_edu.training import TrainingConfig

    warmup, save_every = schedule(steps)
    return [Run(f"{objective}-s{seed}", model_config(),
                TrainingConfig(objective=objective, steps=steps, batch_size=BATCH, max_seq_len=MAX_SEQ_LEN, seed=seed,
                               lr=LR, optimizer=OPTIMIZER, warmup_steps=warmup, save_every=save_every, log_every=10,
                               pairs=TRAIN_PAIRS))
            for objective in OBJECTIVES for seed in SEEDS]


def start_sha256(start: Path | None = None) -> str:
    """The committed checkpoint's weights' sha256 (`start`: its folder; the first recipe's by default), after verify
    has checked every file against provenance.json."""
    from albert_edu.tools.book_model import FIRST_DIR, verify

    return verify(start or FIRST_DIR)["sha256"]["model.safetensors"]


def folder(run, runs_dir: Path | None = None, start: str | None = None) -> Path:
    """Where a finished run lives: its name and a fingerprint of everything that decides its weights (the
    run cache's key over settings, data and training code, and the starting checkpoint's sha256, `start`, which
    is computed when not given)."""
    from albert_edu.run_cache import run_key
    from albert_edu.sources import LARGE_DIR

    start = start or start_sha256()
    key = hashlib.sha256((run_key(run, LARGE_DIR) + start).encode()).hexdigest()[:16]
    return Path(runs_dir or LARGE_DIR / "runs" / "table5-book") / f"{run.name}-{key}"


def held_out() -> dict:
    """The held-out pairs every run is asked: for each cutting (neutral, reference) and task, HELD_OUT examples."""
    from albert_edu.corpus import load_documents
    from albert_edu.sources import LARGE_DIR
    from albert_edu.tokenizer import Tokenizer
    from albert_edu.training import validation_examples

    documents = load_documents("validation", LARGE_DIR)
    tokenizer = Tokenizer.load(LARGE_DIR / "tokenizer")
    return {pairs: validation_examples(documents, tokenizer, MAX_SEQ_LEN, HELD_OUT, 4321, pairs)
            for pairs in ("neutral", "reference")}


def start_mlm(examples: dict, start: Path | None = None) -> dict:
    """The book's ALBERT itself, before any continuation, on the neutral SOP pairs' masked pieces: its masked-piece
    counts, hits and summed cross-entropy per document (answers' mlm_by_document), the yardstick of the MLM column."""
    from albert_edu.tools.book_model import FIRST_DIR

    return answers(start or FIRST_DIR, {"neutral": {"sop": examples["neutral"]["sop"]}})["mlm_by_document"]


def answers(path: Path, examples: dict) -> dict:
    """A trained model's answers to every held-out pair (strings of 0s and 1s) and, on the neutral SOP pairs,
    its masked-piece counts, hits and summed cross-entropy per document."""
    from albert_edu.model import AlbertForPreTraining
    from albert_edu.training import predict

    model = AlbertForPreTraining.from_pretrained(path)
    out = {}
    for pairs, tasks in examples.items():
        for task, subset in tasks.items():
            seen = predict(model, subset)
            out[f"{pairs}/{task}"] = "".join(map(str, seen["answers"]))
            if (pairs, task) == ("neutral", "sop"):
                by_document = {"count": Counter(), "right": Counter(), "loss": Counter()}
                for e, right, loss in zip(subset, seen["mlm_right_each"], seen["mlm_loss_each"]):
                    for name, value in (("count", len(e.mlm_positions)), ("right", right), ("loss", loss)):
                        by_document[name][e.document] += value
                documents = sorted(by_document["count"])
                out["mlm_by_document"] = {"documents": documents, **{
                    name: [round(counts[d], 4) for d in documents] for name, counts in by_document.items()}}
    return out


def train_one(run, examples: dict, runs_dir: Path | None = None, start: Path | None = None,
              device: str = "cpu") -> Path:
    """Train (or resume) one run from the book's ALBERT (`start`: the first recipe's by default) on `device`, in
    fp32, score it, and rename its folder complete."""
    from albert_edu.sources import LARGE_DIR
    from albert_edu.tools.book_model import FIRST_DIR
    from albert_edu.training import pretrain

    final = folder(run, runs_dir, start_sha256(start))
    if (final / "result.json").is_file():
        return final
    partial = final.with_name(f".{final.name}.partial")
    if partial.exists() and not (partial / "checkpoints" / "latest").is_file():
        shutil.rmtree(partial)  # nothing to resume from
    started = time.perf_counter()
    pretrain(run.model, run.training, partial, resume=partial.exists(), data_dir=LARGE_DIR, progress=False,
             init_from=start or FIRST_DIR, device=device, precision="fp32")
    seconds = round(time.perf_counter() - started, 1)
    result = {"name": run.name, "training": asdict(run.training), "seconds": seconds, **answers(partial, examples)}
    shutil.rmtree(partial / "checkpoints")
    (partial / "result.json").write_text(json.dumps(result) + "\n")
    partial.rename(final)
    return final


def made_where() -> dict:
    """Where a results file was made: the commit of the working tree and the machine."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return {"commit": commit, "machine": f"{platform.machine()}, {os.cpu_count()} cores"}


def held_out_record(examples: dict) -> dict:
    """What each held-out pair is, as a results file stores it: per cutting and task, labels and documents."""
    return {f"{pairs}/{task}": {"labels": "".join(str(e.pair_label) for e in subset),
                                "documents": [e.document for e in subset]}
            for pairs, tasks in examples.items() for task, subset in tasks.items()}


def collect(runs_dir: Path | None = None, out: Path = RESULTS, examples: dict | None = None,
            start_dir: Path | None = None, steps: int = STEPS) -> dict:
    """The results file: how it was made, what each held-out pair is, and every run's answers and losses."""
    from albert_edu.tools.book_model import FIRST_DIR

    start_dir = Path(start_dir or FIRST_DIR)
    start = start_sha256(start_dir)
    paths = [folder(run, runs_dir, start) for run in runs(steps)]
    missing = [p.name for p in paths if not (p / "result.json").is_file()]
    if missing:
        raise ValueError(f"runs not finished: {missing}; train them with `{COMMAND}`")
    examples = examples or held_out()
    records = []
    for path in paths:
        result = json.loads((path / "result.json").read_text())
        log = [json.loads(line) for line in (path / "log.jsonl").read_text().splitlines()]
        result["loss"] = [[r["step"], r["mlm_loss"], r["pair_loss"]] for r in log if "loss" in r]  # every 10 steps
        records.append(result)
    command = COMMAND if start_dir.name == FIRST_DIR.name else f"{COMMAND} --start {start_dir.name}"
    command += "" if steps == STEPS else f" --steps {steps}"
    warmup, _ = schedule(steps)
    record = {"command": command, **made_where(),
              "training_minutes": round(sum(r["seconds"] for r in records) / 60, 1),
              "start": {"checkpoint": f"data/checkpoints/{start_dir.name}", "sha256": start,
                        "mlm_by_document": start_mlm(examples, start_dir)},
              "settings": {"steps": steps, "batch_size": BATCH, "lr": LR, "optimizer": OPTIMIZER, "warmup_steps": warmup,
                           "max_seq_len": MAX_SEQ_LEN, "train_pairs": TRAIN_PAIRS, "held_out_per_task": HELD_OUT},
              "loss_columns": ["step", "mlm_loss", "pair_loss"], "held_out": held_out_record(examples),
              "runs": records}
    out.write_text(json.dumps(record) + "\n")
    return record


def probe_path(start: str) -> Path:
    """The results file of the frozen-encoder probes of the committed checkpoint `start` (a name in STARTS)."""
    out = results_path(start)
    return out.with_name(f"{out.stem}-probe.json")


def probe_pairs(seed: int, task: str, documents: list | None = None) -> list:
    """A probe's PROBE_PAIRS training pairs of one task, cut neutrally, for one seed: every pair of a PROBE_SHARE
    random share of the large corpus's training documents (drawn with 1000 + seed, as chapter 8's trunk probes
    draw their passes), shuffled with the same seed and cut."""
    import random

    from albert_edu.corpus import load_documents
    from albert_edu.pretraining_data import create_examples
    from albert_edu.sources import LARGE_DIR
    from albert_edu.tokenizer import Tokenizer

    documents = documents if documents is not None else load_documents("train", LARGE_DIR)
    rng = random.Random(1000 + seed)
    chosen = rng.sample(documents, max(1, round(PROBE_SHARE * len(documents))))
    every = create_examples(chosen, Tokenizer.load(LARGE_DIR / "tokenizer"), task, MAX_SEQ_LEN, seed=1000 + seed,
                            pairs=TRAIN_PAIRS)
    if len(every) < PROBE_PAIRS:
        raise ValueError(f"{len(every)} {task} pairs from {len(chosen)} documents: expected at least {PROBE_PAIRS}")
    rng.shuffle(every)
    return every[:PROBE_PAIRS]


def probe_start(start_dir: Path, examples: dict, seeds: tuple = SEEDS) -> dict:
    """Linear probes of the frozen checkpoint `start_dir` (its encoder before any continuation), one per task,
    seed and read of experiments.PROBE_READS ([CLS] alone, the three averages, with their products, the cosine):
    fitted on probe_pairs, then asked every held-out pair of `examples` (both cuttings). Returns, per task and
    read, the balanced accuracy on the training pairs and the answers to the held-out pairs, per seed."""
    from albert_edu.corpus import load_documents
    from albert_edu.experiments import PROBE_READS, balanced_accuracy, fit_probe, pair_features
    from albert_edu.model import AlbertModel
    from albert_edu.sources import LARGE_DIR

    model = AlbertModel.from_pretrained(start_dir)
    documents = load_documents("train", LARGE_DIR)
    split = lambda f: f.split(f.shape[1] // 3, dim=1)  # [CLS], mean A, mean B
    out = {}
    for task in ("sop", "nsp"):
        asked = {pairs: split(pair_features(model, tasks[task])) for pairs, tasks in examples.items()}
        out[task] = {read: {"train_balanced": [], **{pairs: [] for pairs in examples}} for read in PROBE_READS}
        for seed in seeds:
            train = probe_pairs(seed, task, documents)
            features, labels = split(pair_features(model, train)), [e.pair_label for e in train]
            for read, columns in PROBE_READS.items():
                rule = fit_probe(columns(*features), labels)
                out[task][read]["train_balanced"].append(round(balanced_accuracy(rule(columns(*features)), labels), 4))
                for pairs, seen in asked.items():
                    out[task][read][pairs].append("".join(map(str, rule(columns(*seen)))))
    return out


def write_probe(start: str, examples: dict | None = None) -> dict:
    """Run probe_start on the committed checkpoint `start` and write probe_path(start) with its provenance."""
    start_dir = CHECKPOINTS / start
    examples = examples or held_out()
    began = time.perf_counter()
    probes = probe_start(start_dir, examples)
    record = {"command": f"{COMMAND} --start {start} --probe", **made_where(),
              "minutes": round((time.perf_counter() - began) / 60, 1),
              "start": {"checkpoint": f"data/checkpoints/{start}", "sha256": start_sha256(start_dir)},
              "settings": {"seeds": list(SEEDS), "train_pairs_per_seed": PROBE_PAIRS, "document_share": PROBE_SHARE,
                           "pairs": TRAIN_PAIRS, "max_seq_len": MAX_SEQ_LEN, "held_out_per_task": HELD_OUT},
              "held_out": held_out_record(examples), "probes": probes}
    out = probe_path(start)
    out.write_text(json.dumps(record) + "\n")
    return record


def balanced_means(record: dict, pairs: str = "neutral") -> dict:
    """Per (objective, task): the seeds' mean balanced accuracy, in %, on the held-out pairs cut as `pairs`."""
    from albert_edu.experiments import balanced_accuracy

    out = {}
    for task in ("nsp", "sop"):
        labels = [int(b) for b in record["held_out"][f"{pairs}/{task}"]["labels"]]
        for objective in OBJECTIVES:
            scores = [balanced_accuracy([int(b) for b in r[f"{pairs}/{task}"]], labels) for r in record["runs"]
                      if r["training"]["objective"] == objective]
            out[objective, task] = 100 * sum(scores) / len(scores)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shard", default="0/1", help="I/N: train every N-th run from the I-th (default 0/1: all)")
    parser.add_argument("--collect", action="store_true", help="only write the results file")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--start", default="albert-book-1800", choices=sorted(STARTS),
                        help="the checkpoint the runs continue (default: the first recipe's, which chapter 8 reads)")
    parser.add_argument("--steps", type=int, default=STEPS,
                        help=f"steps per continuation (default {STEPS}, the committed recipe; another length writes its own file)")
    parser.add_argument("--device", default="cpu", help="where to train (cpu, cuda; always fp32); scoring runs on the CPU")
    parser.add_argument("--probe", action="store_true",
                        help="train nothing: fit linear probes of the frozen --start checkpoint and write its -probe file")
    args = parser.parse_args(argv)
    try:
        schedule(args.steps)
    except ValueError as error:
        parser.error(f"--steps {args.steps}: {error}")
    try:
        index, count = map(int, args.shard.split("/"))
        assert 0 <= index < count
    except (ValueError, AssertionError):
        parser.error(f"--shard {args.shard!r}: expected I/N with 0 <= I < N, as in 0/2")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.probe:
        record = write_probe(args.start)
        print(f"wrote {probe_path(args.start).relative_to(ROOT)} ({record['minutes']} minutes)")
        return
    examples, start, out = held_out(), CHECKPOINTS / args.start, results_path(args.start, args.steps)
    if not args.collect:
        for run in runs(args.steps)[index::count]:
            print(f"{run.name}: {train_one(run, examples, start=start, device=args.device)}", flush=True)
    if args.collect or count == 1:
        record = collect(examples=examples, out=out, start_dir=start, steps=args.steps)
        print(f"wrote {out.relative_to(ROOT)} ({record['training_minutes']} minutes of training)")


if __name__ == "__main__":
    main()
