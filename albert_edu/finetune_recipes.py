"""Chapter 10's fine-tuning recipes, the plumbing its section 10.3 points to: what the grids fine-tune and how much
("book" and "full"), the contenders (where each fine-tuned encoder starts), one cell of the sentiment grid
(`sentiment_fold`), and `finetune_sentiment`, the one-model command `albert-edu finetune --start DIR --out DIR`
runs. What fine-tuning is (the classifier, the loop, the folds) is chapter 10's, in albert_edu.downstream;
albert_edu.finetune_grid schedules and caches the grids."""

import json
from pathlib import Path

from albert_edu.config import AlbertConfig
from albert_edu.corpus import DATA_DIR, write_atomically
from albert_edu.downstream import (FinetuneConfig, checkpoint_tokenizer, classifier_from, encode_sentences, fit,
                                   fold_indices, predict_classes, read_polarity, sentence_logits, stratified_folds)


# What chapter 10 fine-tunes, and how much. "book" fits the chapter's time (the encoders of chapter 8's book runs,
# 200 steps of pre-training, one seed). "full" is the longer grid on the encoders of chapter 8's full recipe (a
# 3,000-step MLM trunk continued 600 steps with each objective, three pre-training seeds; fine-tuning seed s starts
# from pre-training seed s mod 3): twice the seeds, 10 folds, five times the continuation training items.
# `albert-edu finetune --recipe full` trains those encoders first if the cache lacks them (about 1.5 hours on 2
# cores), then runs the grid (about 1.5 hours more), saving each finished cell so that a killed command resumes.
FINETUNE_RECIPES = {
    "book": {"pretraining": "book", "seeds": (0, 1, 2), "folds": 5,
             "sentiment": {"epochs": 10, "batch_size": 16, "lr": 3e-4, "max_seq_len": 64},
             "continuation": {"candidates": 4, "window": 5, "per_document": 15, "train_items": 400, "eval_items": 600,
                              "epochs": 2, "batch_size": 16, "lr": 3e-4, "max_seq_len": 64}},
    "full": {"pretraining": "full", "seeds": (0, 1, 2, 3, 4, 5), "folds": 10,
             "sentiment": {"epochs": 10, "batch_size": 16, "lr": 3e-4, "max_seq_len": 64},
             "continuation": {"candidates": 4, "window": 5, "per_document": 15, "train_items": 2000, "eval_items": 800,
                              "epochs": 2, "batch_size": 16, "lr": 3e-4, "max_seq_len": 128}},
}
CONTENDERS = ("from scratch", "MLM only", "MLM + NSP", "MLM + SOP")  # where each fine-tuned encoder starts


def check_finetune_recipe(recipe: str) -> dict:
    if recipe not in FINETUNE_RECIPES:
        raise ValueError(f"recipe={recipe!r}: expected one of {sorted(FINETUNE_RECIPES)}")
    return FINETUNE_RECIPES[recipe]


def sentiment_fold(start, seed: int, fold: int, folds: int, settings: dict, model_config: AlbertConfig | None = None,
                   on_epoch=None) -> tuple:
    """Fine-tune one sentiment classifier from `start` (a checkpoint directory, or None with model_config: from
    scratch) on every fold but `fold`. `on_epoch(model, rows, labels, test, record)`, when given, is called after
    each epoch (it must not train or draw random numbers). Returns the model, the encoded sentences, the labels and
    the training and test items."""
    if not isinstance(fold, int) or not 0 <= fold < folds:
        raise ValueError(f"fold={fold!r}: expected an integer from 0 to {folds - 1} (folds={folds})")
    texts, labels = read_polarity()
    config = FinetuneConfig(seed=seed, **settings)
    rows = encode_sentences(checkpoint_tokenizer(start), texts, config.max_seq_len)
    train, test = fold_indices(stratified_folds(labels, folds), fold)
    model = classifier_from(start, 2, seed, model_config)
    report = None if on_epoch is None else (lambda record: on_epoch(model, rows, labels, test, record))
    fit(model, [rows[i] for i in train], [labels[i] for i in train], config, sentence_logits, report)
    return model, rows, labels, train, test


def finetune_sentiment(start, out_dir, seed: int = 0, fold: int = 0, folds: int = 5, settings: dict | None = None,
                       model_config: AlbertConfig | None = None, progress=print) -> dict:
    """Fine-tune one sentiment classifier, as a user would: train on every fold but `fold`, report the loss and the
    held-out accuracy on `fold` after each epoch, then save the model with save_pretrained (config.json and
    model.safetensors, each written to a temporary file and renamed, as pre-training's checkpoints are), the
    tokenizer beside it, and log.jsonl. `start` is a checkpoint directory, or None with model_config (from
    scratch). The held-out accuracy is reported, never used to choose anything (no early stopping, no epoch picked
    by it). Returns the last epoch's record."""
    settings = dict(FINETUNE_RECIPES["book"]["sentiment"], **(settings or {}))
    if start is not None and not (Path(start) / "config.json").is_file():
        raise FileNotFoundError(f"{start}: expected a checkpoint directory with config.json and model.safetensors")
    records = []

    def held_out(model, rows, labels, test, entry: dict) -> None:  # predict_classes: no dropout, no random numbers
        answers = [p[1] > 0.5 for p in predict_classes(model, [rows[i] for i in test])]
        entry["held_out_accuracy"] = sum(a == labels[i] for a, i in zip(answers, test)) / len(test)
        records.append(entry)
        progress(entry)

    model = sentiment_fold(start, seed, fold, folds, settings, model_config, held_out)[0]
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir)
    source = Path(start) if start is not None and (Path(start) / "spiece.model").is_file() else DATA_DIR / "tokenizer"
    for name in ("spiece.model", "tokenizer_config.json"):
        if (source / name).is_file():
            write_atomically(out_dir / name, (source / name).read_bytes())
    lines = [json.dumps({"start": str(start), "fold": fold, "folds": folds, **settings, "seed": seed})]
    write_atomically(out_dir / "log.jsonl", ("\n".join(lines + [json.dumps(r) for r in records]) + "\n").encode())
    return records[-1]
