"""The book's pre-trained ALBERT: an MLM-only ALBERT trained on the large corpus (data/large/, chapter 2,
section 2.5) with the recipe below, chosen by the sweeps in data/results/sweep-large-*.json, and committed in
data/checkpoints/albert-book/ with the record of how it was made (chapter 7, section 7.8).

    albert-edu pretrain-book [--device cpu|cuda] [--out DIR]   # trains, or resumes the run in DIR
    albert-edu pretrain-book --commit DIR [--minutes M --device-name NAME]   # DIR's finished run into data/checkpoints/
    albert-edu pretrain-book --score   # the held-out targets and the probes, recomputed from the checkpoint

The recipe is the same command on any device: 7 minutes on one H200 (shared with two other runs, the passes'
examples made ahead: --prefetch), about 9 hours on 2 CPU cores by the first recipe's speed (resumable: a checkpoint
every 100 steps). The first recipe, 1,800 steps (data/checkpoints/albert-book-1800/, its scores in
data/results/albert-book-1800.json), stopped on the plateau before the model uses word order (chapter 7, section
7.8); chapters 8-10 and 12 still read it until they move onto this one.
`score` writes data/results/albert-book.json: the held-out MLM accuracy and loss per document (every held-out
document's examples, with a bootstrap interval over documents), the unigram yardstick on the same masked pieces,
and the fill-mask probes of data/probes-large.json."""

import functools
import hashlib
import json
import shutil
import time
from pathlib import Path

from albert_edu.tools.manifest import ROOT

RECIPE = {"geometry": "E128-H256-L6", "batch_size": 128, "optimizer": "adamw", "lr": 2e-3, "steps": 6000,
          "evaluations": 12}
FIRST_RECIPE = dict(RECIPE, steps=1800, evaluations=6)  # the first book model's (albert-book-1800)
SAVE_EVERY = 100  # a checkpoint to resume from every 100 steps (about 11 minutes on 2 CPU cores)
FILES = ("config.json", "log.jsonl", "model.safetensors")
BOOK_DIR = ROOT / "data" / "checkpoints" / "albert-book"
RESULTS = ROOT / "data" / "results" / "albert-book.json"
FIRST_DIR = ROOT / "data" / "checkpoints" / "albert-book-1800"  # the first recipe's model, on the plateau
FIRST_RESULTS = ROOT / "data" / "results" / "albert-book-1800.json"
PROBES = ROOT / "data" / "probes-large.json"
COMMAND = "albert-edu pretrain-book"


def model_config(recipe: dict | None = None):
    from albert_edu.sources import LARGE_VOCAB_SIZE
    from albert_edu.tools.large_sweep import model_config

    return model_config((recipe or RECIPE)["geometry"], LARGE_VOCAB_SIZE)


def training_config(save_every: int = SAVE_EVERY, recipe: dict | None = None):
    """The recipe's TrainingConfig (or that of another `recipe` of the same keys, a candidate): large_sweep's for
    the same run (warm-up over the first 1/15 of the steps, `evaluations` evaluations), with a checkpoint every
    `save_every` steps, which changes nothing else."""
    from dataclasses import replace

    from albert_edu.tools.large_sweep import training_config

    r = recipe or RECIPE
    return replace(training_config(r["lr"], r["steps"], r["evaluations"], r["batch_size"], r["optimizer"]),
                   save_every=save_every)


@functools.cache
def _training_text():
    """The large corpus's training documents and its tokenizer, read once per worker process."""
    from albert_edu.corpus import load_documents
    from albert_edu.sources import LARGE_DIR
    from albert_edu.tokenizer import Tokenizer

    return load_documents("train", LARGE_DIR), Tokenizer.load(LARGE_DIR / "tokenizer")


def _make_epoch(seed: int, objective: str, max_seq_len: int, pairs: str):
    """One pass's examples, as ExampleStream makes them (in a worker process)."""
    from albert_edu.pretraining_data import create_examples

    return create_examples(*_training_text(), objective, max_seq_len, seed, pairs)


class prefetched_passes:
    """While in this context, each pass over the training documents that a run of `config` will take is made ahead
    by `workers` processes, so that the training loop never waits for example creation (on a GPU it took about as
    long as the pass's training). The examples are the very ones the loop would make: the same function, with the
    same arguments, called in another process; only the wall time changes."""

    def __init__(self, config, workers: int):
        self.config, self.workers = config, workers

    def __enter__(self):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        import albert_edu.resume as resume

        c = self.config
        passes = -(-c.steps * c.batch_size // 90_000)  # at most this many: each pass makes over 90,000 examples
        self.pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        seeds = [c.seed * 1_000_003 + epoch for epoch in range(passes)]  # ExampleStream's seed of each pass
        futures = {seed: self.pool.submit(_make_epoch, seed, c.objective, c.max_seq_len, c.pairs) for seed in seeds}
        self.original = resume.create_examples

        def create_examples(documents, tokenizer, objective, max_seq_len, seed, pairs="reference"):
            if (objective, max_seq_len, pairs) == (c.objective, c.max_seq_len, c.pairs) and seed in futures:
                return futures.pop(seed).result()  # only the training stream calls through albert_edu.resume
            return self.original(documents, tokenizer, objective, max_seq_len, seed, pairs)

        resume.create_examples = create_examples
        return self

    def __exit__(self, *exc):
        import albert_edu.resume as resume

        resume.create_examples = self.original
        self.pool.shutdown(wait=False, cancel_futures=True)
        return False


def train(out: Path, device: str = "cpu", stop_after: int | None = None, progress: bool = True,
          recipe: dict | None = None, prefetch: int = 0) -> dict:
    """Train the recipe (or a candidate `recipe`) into `out`, or resume the run there; fp32 on every device, so
    that a run made on a GPU and one made on the CPU follow the same log to within rounding. prefetch: processes
    that make the coming passes' examples ahead (prefetched_passes; 0: the loop makes each when it needs it)."""
    from contextlib import nullcontext

    from albert_edu.sources import LARGE_DIR
    from albert_edu.training import pretrain

    out, config = Path(out), training_config(recipe=recipe)
    with prefetched_passes(config, prefetch) if prefetch else nullcontext():
        return pretrain(model_config(recipe), config, out, resume=(out / "log.jsonl").exists(), data_dir=LARGE_DIR,
                        stop_after=stop_after, progress=progress, device=device, precision="fp32")


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def commit_checkpoint(run: Path, device: str, minutes: float, commit: str, command: str = COMMAND,
                      folder: Path = BOOK_DIR) -> dict:
    """Copy a finished run of the recipe into `folder` with provenance.json: the command, the code's commit, the
    device, the minutes of training, the tokens seen, the held-out scores of its last evaluation and the sha256 of
    each file. Refuses a run of another recipe or an unfinished one."""
    run = Path(run)
    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    if not (run / "model.safetensors").exists() or not steps or steps[-1]["step"] != RECIPE["steps"]:
        raise ValueError(f"{run} holds no finished run of the recipe: expected model.safetensors and a log that reaches "
                         f"step {RECIPE['steps']}")
    saved, expected = json.loads((run / "config.json").read_text()), model_config().to_dict()
    if any(saved.get(name) != value for name, value in expected.items()):
        raise ValueError(f"{run}/config.json is not the recipe's model ({RECIPE['geometry']}: {expected})")
    folder.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(run / name, folder / name)
    evaluation = [r for r in records if "eval" in r][-1]
    record = {"command": command, "commit": commit, "device": device, "precision": "fp32", "minutes": minutes,
              "recipe": RECIPE, "sequences_seen": RECIPE["steps"] * RECIPE["batch_size"],
              "tokens_seen": tokens_seen(),
              "held_out_at_end": {"step": evaluation["step"], **evaluation["eval"]},
              "sha256": {name: sha256(folder / name) for name in FILES}}
    (folder / "provenance.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def tokens_seen() -> int:
    """The pieces in the examples the recipe's training takes, [CLS] and [SEP] included: the stream made again from
    the recipe's seed (a minute or two: each pass's examples are made anew)."""
    from albert_edu.corpus import load_documents
    from albert_edu.resume import ExampleStream
    from albert_edu.sources import LARGE_DIR
    from albert_edu.tokenizer import Tokenizer

    config = training_config()
    stream = ExampleStream(load_documents("train", LARGE_DIR), Tokenizer.load(LARGE_DIR / "tokenizer"),
                           config.objective, config.max_seq_len, config.seed, config.pairs)
    return sum(len(e.input_ids) for _ in range(config.steps) for e in stream.take(config.batch_size))


def verify(folder: Path = BOOK_DIR) -> dict:
    """The provenance of the checkpoint in `folder`, after checking each file's sha256 against it: a missing or
    changed file is a ValueError that names it, with both digests and what to do."""
    folder = Path(folder)
    if not (folder / "provenance.json").exists():
        raise ValueError(f"{folder} holds no provenance.json: expected the book's checkpoint (git checkout it, or "
                         f"train it with `{COMMAND}`)")
    record = json.loads((folder / "provenance.json").read_text())
    for name, expected in record["sha256"].items():
        if not (folder / name).exists():
            raise ValueError(f"{folder / name} is missing: expected the file that provenance.json lists")
        found = sha256(folder / name)
        if found != expected:
            raise ValueError(f"{folder / name} has sha256 {found}, but provenance.json records {expected}: the file "
                             f"changed since it was committed; restore it (git checkout -- {name}) or train again")
    return record


def load(folder: Path = BOOK_DIR):
    """The book's pre-trained ALBERT (AlbertForPreTraining, in eval mode), its files checked first (verify)."""
    from albert_edu.model import AlbertForPreTraining

    verify(folder)
    return AlbertForPreTraining.from_pretrained(folder).eval()


def held_out_examples(data_dir: Path | None = None, seed: int = 4321):
    """Every held-out document's MLM examples (objective "none": up to 128 pieces each, masked as in training),
    in a fixed order: the set the targets are scored on."""
    from albert_edu.corpus import load_documents
    from albert_edu.pretraining_data import create_examples
    from albert_edu.sources import LARGE_DIR
    from albert_edu.tokenizer import Tokenizer

    data_dir = Path(data_dir or LARGE_DIR)
    tokenizer = Tokenizer.load(data_dir / "tokenizer")
    return create_examples(load_documents("validation", data_dir), tokenizer, "none", 128, seed=seed)


def unigram_log_p(data_dir: Path | None = None):
    """log p of every piece under the large training split's piece frequencies: chapter 8's add-one yardstick
    (albert_edu.experiments.unigram_log_p) for the book model's corpus."""
    from albert_edu.corpus import load_documents
    from albert_edu.experiments import unigram_log_p as yardstick
    from albert_edu.sources import LARGE_DIR
    from albert_edu.tokenizer import Tokenizer

    data_dir = Path(data_dir or LARGE_DIR)
    tokenizer = Tokenizer.load(data_dir / "tokenizer")
    ids = [i for d in load_documents("train", data_dir) for s in tokenizer.encode_batch(d.sentences) for i in s]
    return yardstick(ids, tokenizer.vocab_size)


COLUMNS = ("masked", "right", "loss", "unigram", "masked_at_mask", "right_at_mask", "loss_at_mask", "unigram_at_mask")


def example_counts(model, examples, log_p, batch_size: int = 128):
    """For each example, over its masked positions: how many, how many the model's top guess gets right, the sum of
    the model's cross-entropy and of the unigram yardstick's (-log_p of the answer); then the same four over the
    positions whose input is [MASK] alone (chapter 6 leaves one in ten masked positions as it was and puts a random
    piece in another, and there the model can see or be misled by the piece itself). Rows in COLUMNS' order."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from albert_edu.pretraining_data import collate
    from albert_edu.tokenizer import Tokenizer

    rows = []
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            chunk = examples[start:start + batch_size]
            batch = collate(chunk)
            batch.pop("sentence_order_label")
            labelled = batch["labels"] != -100
            answers = batch["labels"][labelled]  # row-major: example by example, positions in order
            logits = model(**batch).masked_lm_logits
            right = (logits.argmax(-1) == answers).double()
            loss = F.cross_entropy(logits.double(), answers, reduction="none")
            base = torch.from_numpy(-log_p[answers.numpy()])
            at_mask = (batch["input_ids"][labelled] == Tokenizer.mask_id).double()
            columns = torch.stack([torch.ones_like(right), right, loss, base], 1)
            per_position = torch.cat([columns, columns * at_mask[:, None]], 1)
            owner = labelled.nonzero()[:, 0]
            sums = torch.zeros(len(chunk), 8, dtype=torch.float64).index_add_(0, owner, per_position)
            rows += sums.tolist()
    return np.asarray(rows)


def probe(model, tokenizer, probes: list[dict], k: int = 5) -> list[dict]:
    """Each probe sentence through chapter 10's `fill_mask`: the model's k best pieces at its [MASK], with
    probabilities, and whether the answer (one piece) is among them."""
    from albert_edu.downstream import fill_mask

    rows = []
    for p in probes:
        (best,) = fill_mask(model, tokenizer, p["text"], top_k=k)
        guesses = [piece for piece, _ in best]
        answer = tokenizer.pieces(tokenizer.encode(" " + p["answer"]))[0]
        rows.append({"text": p["text"], "answer": p["answer"], "top": guesses, "p": [round(q, 4) for _, q in best],
                     "hit": answer in guesses, "rank_1": guesses[0]})
    return rows


def score(folder: Path = BOOK_DIR, out: Path = RESULTS, draws: int = 2000) -> dict:
    """The targets, recomputed from the checkpoint in `folder`: held-out MLM accuracy and loss with 95% intervals
    (a bootstrap over documents), the unigram yardstick on the same masked pieces and the model's margin under it,
    over all masked positions (as the paper's MLM accuracy counts them) and over the [MASK] positions alone
    ("_at_mask"); and the probes. Written to `out` with each document's counts (the stored predictions)."""
    import numpy as np

    from albert_edu.experiments import bootstrap_weights, interval
    from albert_edu.sources import LARGE_DIR
    from albert_edu.tokenizer import Tokenizer

    started = time.perf_counter()
    record = verify(folder)
    model = load(folder)
    examples = held_out_examples()
    counts = example_counts(model, examples, unigram_log_p())
    documents = sorted({e.document for e in examples})
    column = {d: j for j, d in enumerate(documents)}
    per_document = np.zeros((len(documents), len(COLUMNS)))
    for e, row in zip(examples, counts):
        per_document[column[e.document]] += row
    totals = bootstrap_weights(documents, draws=draws) @ per_document  # one row per draw (row 0: the data)

    def scores(offset: int, suffix: str) -> dict:
        n, right, loss, base = (totals[:, offset + k] for k in range(4))
        return {f"mlm_accuracy{suffix}": float(right[0] / n[0]), f"mlm_accuracy{suffix}_interval": interval(right / n),
                f"mlm_loss{suffix}": float(loss[0] / n[0]), f"mlm_loss{suffix}_interval": interval(loss / n),
                f"unigram_loss{suffix}": float(base[0] / n[0]), f"margin_under_unigram{suffix}": float((base - loss)[0] / n[0]),
                f"margin{suffix}_interval": interval((base - loss) / n)}

    tokenizer = Tokenizer.load(LARGE_DIR / "tokenizer")
    probes = probe(model, tokenizer, json.loads(PROBES.read_text())["probes"])
    result = {
        "checkpoint": str(Path(folder).relative_to(ROOT)) if Path(folder).is_relative_to(ROOT) else str(folder),
        "model_sha256": record["sha256"]["model.safetensors"],
        "examples": len(examples), "documents": len(documents), "masked_pieces": int(per_document[:, 0].sum()),
        "at_mask_pieces": int(per_document[:, 4].sum()),
        **scores(0, ""), **scores(4, "_at_mask"),
        "probe_top5_rate": sum(p["hit"] for p in probes) / len(probes),
        "probe_distinct_top1": len({p["rank_1"] for p in probes}),
        "targets": {"mlm_accuracy": 0.30, "margin_under_unigram": 1.5, "probe_top5_rate": 0.40},
        "seconds": round(time.perf_counter() - started, 1),
        "probes": probes,
        "per_document": {"document": documents, "columns": list(COLUMNS),
                         "values": [[int(v) if k in (0, 1, 4, 5) else round(float(v), 4) for k, v in enumerate(row)]
                                    for row in per_document]},
    }
    Path(out).write_text(json.dumps(result, indent=1) + "\n")
    return result
