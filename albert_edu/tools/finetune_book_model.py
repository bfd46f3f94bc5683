"""Chapter 10's downstream test of the book's pre-trained ALBERT (section 10.4): does starting from it beat starting
from random weights of the same shape on a task it was not trained for? The task is chapter 10's multi-sentence one
(which of four sentences comes next, the wrong ones from other documents of the same source), built from the large
corpus the model was trained on (training items from 4,000 training documents drawn from every source, held-out
items from the held-out split) and read with its tokenizer; both contenders are fine-tuned with the same settings,
seeds and items (albert_edu.finetune_grid's continuation cells, one thread each), and every held-out item's logits
are stored, so that every figure of the section can be recomputed from data/results/finetune-book-model.json.

    python -m albert_edu.tools.finetune_book_model [--workers 2]   # runs what is missing (resumable), then collects
    python -m albert_edu.tools.finetune_book_model --start albert-book   # the 6,000-step model -> ...-6000.json

Each finished cell is kept (in data/large/runs/) until the grid is complete, under a name that fingerprints the
settings, the code, the data and the checkpoint's weights, so a killed run resumes and a changed input starts anew."""

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path

from albert_edu.tools.manifest import ROOT

SETTINGS = {"corpus": "large", "train_documents": 4000, "candidates": 4, "window": 5, "per_document": 15,
            "train_items": 2000, "eval_items": 800, "epochs": 2, "batch_size": 16, "lr": 3e-4, "max_seq_len": 64}
DISTRACTORS = "other"  # topic tells them apart; "same" (order only) is left out: section 8.7's SOP runs learned no order
SEEDS = (0, 1, 2)
CONTENDERS = ("from scratch", "book ALBERT")
RESULTS = ROOT / "data" / "results" / "finetune-book-model.json"
CHECKPOINTS = ROOT / "data" / "checkpoints"
STARTS = {"albert-book-1800": RESULTS,  # the first recipe's model, on the plateau
          "albert-book": ROOT / "data" / "results" / "finetune-book-model-6000.json"}  # the model that left it
COMMAND = "python -m albert_edu.tools.finetune_book_model"


def grid_key(start: str) -> str:
    """A fingerprint of what decides the results: the settings, the checkpoint's sha256 (`start`), the source of the
    fine-tuning code and of every library module it imports, and the large corpus's splits and tokenizer."""
    from albert_edu.run_cache import code_files
    from albert_edu.sources import LARGE_DIR

    digest = hashlib.sha256(json.dumps([SETTINGS, DISTRACTORS, SEEDS, CONTENDERS, start]).encode())
    package = ROOT / "albert_edu"
    for path in [package / name for name in code_files("finetune_grid")] + [
            LARGE_DIR / "prepared" / "train.jsonl", LARGE_DIR / "prepared" / "validation.jsonl",
            LARGE_DIR / "tokenizer" / "spiece.model"]:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def jobs(start_dir: Path | None = None) -> list[tuple]:
    """Every fine-tuning of the grid, contender by contender, seed by seed: finetune_grid's continuation cells.
    `start_dir`: the checkpoint the "book ALBERT" contender starts from (the first recipe's by default)."""
    from albert_edu.tools.book_model import FIRST_DIR, model_config

    starts = {"from scratch": None, "book ALBERT": str(start_dir or FIRST_DIR)}
    return [("continuation", dict(start=starts[c], model_config=model_config(), seed=s, distractors=DISTRACTORS,
                                  settings=SETTINGS)) for c in CONTENDERS for s in SEEDS]


def run(workers: int = 2, runs_dir: Path | None = None, out: Path = RESULTS, progress: bool = True,
        start_dir: Path | None = None) -> dict:
    """Fine-tune what is missing, then write `out`: the held-out items (document, sources, answer, the word-overlap
    rule's counts) and, for each contender and seed, every item's logits over its candidates. `start_dir`: the
    pre-trained checkpoint (the first recipe's by default)."""
    from albert_edu.corpus import write_atomically
    from albert_edu.finetune_grid import _stored, continuation_data, run_units
    from albert_edu.downstream import overlap_scores
    from albert_edu.sources import LARGE_DIR
    from albert_edu.tools.table5_book import start_sha256

    start = start_sha256(start_dir)
    keep = Path(runs_dir or LARGE_DIR / "runs") / f".finetune-book-model-{grid_key(start)}.partial"
    keep.mkdir(parents=True, exist_ok=True)
    began = time.time()
    units = run_units(jobs(start_dir), workers, progress, keep)
    train, test = continuation_data(SETTINGS, DISTRACTORS)
    outputs = iter(u["output"] for u in units)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    command = COMMAND if start_dir is None or Path(start_dir).name == "albert-book-1800" else \
        f"{COMMAND} --start {Path(start_dir).name}"
    record = {"command": command, "commit": commit, "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "workers": workers, "settings": SETTINGS, "distractors": DISTRACTORS, "seeds": list(SEEDS),
              "start_sha256": start, "train_items": len(train),
              "items": {"documents": [t["document"] for t in test], "sources": [t["sources"] for t in test],
                        "answers": [t["answer"] for t in test], "overlap": overlap_scores(test)},
              "logits": {c: [[[_stored(q) for q in item] for item in next(outputs)] for _ in SEEDS] for c in CONTENDERS},
              "cell_minutes": [round(u["seconds"] / 60, 2) for u in units],
              "wall_minutes_this_sitting": round((time.time() - began) / 60, 1)}
    write_atomically(Path(out), (json.dumps(record) + "\n").encode())
    shutil.rmtree(keep)
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="fine-tunings at once, one thread each (default 2)")
    parser.add_argument("--start", default="albert-book-1800", choices=sorted(STARTS),
                        help="the pre-trained checkpoint (default: the first recipe's; albert-book: the 6,000-step one)")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers {args.workers}: expected a positive integer")
    out = STARTS[args.start]
    record = run(args.workers, out=out, start_dir=CHECKPOINTS / args.start)
    print(f"wrote {out.relative_to(ROOT)} ({sum(record['cell_minutes']):.1f} minutes of fine-tuning)")


if __name__ == "__main__":
    main()
