"""The book's command line: `python -m albert_edu <command> --help`.

A dispatcher only: each command calls a function that a chapter defines and explains.
"""

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path


def prepare_data(args) -> None:
    from albert_edu.corpus import CorpusError, prepare_corpus

    try:
        stats = prepare_corpus(Path(args.data_dir), tuple(Path(p) for p in args.extra))
    except CorpusError as error:
        sys.exit(f"error: {error}")
    for split in ("train", "validation"):
        s = stats[split]
        print(f"{split}: {s['documents']} documents, {s['sentences']:,} sentences, {s['words']:,} words")
    for reason, count in stats["skipped"].items():
        print(f"skipped {count}: {reason}")


def train_tokenizer(args) -> None:
    from albert_edu.tokenizer import Tokenizer, train_tokenizer

    data_dir = Path(args.data_dir)
    if not (data_dir / "prepared" / "stats.json").exists():
        sys.exit(f"error: no prepared corpus in {data_dir}; run `python -m albert_edu prepare-data` first")
    try:
        path = train_tokenizer(Path(args.out) if args.out else data_dir / "tokenizer", args.vocab_size, data_dir)
    except ValueError as error:
        sys.exit(f"error: {error}")
    print(f"tokenizer: {path} ({Tokenizer(path).vocab_size} pieces)")


def make_examples(args) -> None:
    from albert_edu.corpus import load_documents
    from albert_edu.pretraining_data import create_examples, write_examples
    from albert_edu.tokenizer import Tokenizer

    if args.max_seq_len < 5:
        sys.exit(f"error: --max-seq-len {args.max_seq_len}: expected at least 5 ([CLS] A [SEP] B [SEP])")
    try:
        documents, tokenizer = load_documents(args.split, Path(args.data_dir)), Tokenizer.load(Path(args.tokenizer))
    except FileNotFoundError as error:
        sys.exit(f"error: {error}")
    examples = create_examples(documents, tokenizer, args.objective, args.max_seq_len, args.seed)
    write_examples(examples, Path(args.out))
    print(f"wrote {len(examples):,} {args.objective} examples from {len(documents)} {args.split} documents to {args.out}")


def pretrain(args) -> None:
    from albert_edu.config import AlbertConfig
    from albert_edu.tokenizer import Tokenizer
    from albert_edu.training import TrainingConfig, pretrain

    try:
        vocab_size = Tokenizer.load(Path(args.data_dir) / "tokenizer").vocab_size
        model_config = AlbertConfig.from_preset(args.preset, vocab_size=vocab_size)
        if args.no_dropout:
            model_config = replace(model_config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                   classifier_dropout_prob=0.0)
        config = TrainingConfig(objective=args.objective, steps=args.steps, batch_size=args.batch_size,
                                max_seq_len=args.max_seq_len, seed=args.seed, lr=args.lr,
                                warmup_steps=args.warmup_steps, accumulation=args.accumulation,
                                save_every=args.save_every, eval_every=args.eval_every)
        result = pretrain(model_config, config, Path(args.out), resume=args.resume, data_dir=Path(args.data_dir))
    except (ValueError, FileNotFoundError) as error:
        sys.exit(f"error: {error}")
    print(json.dumps(result))


def experiment(args) -> None:
    import platform
    import time

    from albert_edu.analysis import figure1_curves
    from albert_edu.experiments import RESULTS_DIR, figure1_runs, run_summary, score, table5_runs, train_all

    data_dir = Path(args.data_dir)
    if not (data_dir / "tokenizer" / "spiece.model").exists():
        sys.exit(f"error: no tokenizer in {data_dir}; run `python -m albert_edu prepare-data` and "
                 f"`python -m albert_edu train-tokenizer` first")
    try:
        table5, figure1 = table5_runs(args.recipe), figure1_runs(args.recipe)
    except ValueError as error:
        sys.exit(f"error: {error}")
    runs = table5 + [r for r in figure1.values() if r not in table5]
    started = time.perf_counter()
    paths = train_all(runs, Path(args.runs_dir), data_dir, workers=args.workers)
    # scored again with the current scoring code, which is not part of a run's key; once per run, though the
    # ALBERT-style run of Figure 1 is also a Table 5 run
    summaries = [run_summary(p) | {"scores": score(p, data_dir, r.training.max_seq_len)} for r, p in zip(runs, paths)]
    results = {"recipe": args.recipe, "command": f"python -m albert_edu experiment --recipe {args.recipe}",
               "machine": f"{platform.machine()}, {os.cpu_count()} cores", "workers": args.workers,
               "table5": summaries[:len(table5)],
               "figure1": {style: summaries[runs.index(r)] | {"transitions": figure1_curves(paths[runs.index(r)], data_dir)}
                           for style, r in figure1.items()},
               # each run's own training time (they ran `workers` at a time), and this call's (shorter when cached)
               "training_minutes": round(sum(s["seconds"] for s in summaries) / 60, 1),
               "minutes": round((time.perf_counter() - started) / 60, 1)}
    out = Path(args.out) if args.out else RESULTS_DIR / f"{args.recipe}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}: {len(runs)} runs, {results['training_minutes']} minutes of training summed over runs, "
          f"{results['minutes']} minutes for this call")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m albert_edu", description="Long-running work of the ALBERT book.")
    commands = parser.add_subparsers(dest="command", required=True)
    data_dir = str(Path(__file__).resolve().parent.parent / "data")

    p = commands.add_parser("prepare-data", help="fetch, verify, clean and split the corpus (chapter 2)")
    p.add_argument("--data-dir", default=data_dir, help="where raw/ and prepared/ go (default: data/)")
    p.add_argument("--extra", nargs="*", default=[], metavar="FILE",
                   help="extra UTF-8 text files, documents separated by blank lines")
    p.set_defaults(run=prepare_data)

    p = commands.add_parser("train-tokenizer", help="train the SentencePiece unigram tokenizer (chapter 2)")
    p.add_argument("--data-dir", default=data_dir)
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--out", help="output directory (default: data/tokenizer)")
    p.set_defaults(run=train_tokenizer)

    p = commands.add_parser("make-examples", help="write pre-training examples as JSON lines (chapter 6)")
    p.add_argument("--objective", required=True, choices=["sop", "nsp", "none"])
    p.add_argument("--out", required=True, help="output file (.jsonl)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-seq-len", type=int, default=128)
    p.add_argument("--split", default="train", choices=["train", "validation"])
    p.add_argument("--data-dir", default=data_dir)
    p.add_argument("--tokenizer", default=str(Path(data_dir) / "tokenizer"))
    p.set_defaults(run=make_examples)

    p = commands.add_parser("pretrain", help="pre-train an ALBERT (chapter 7); also runs under torchrun")
    p.add_argument("--preset", required=True, help="a preset of AlbertConfig, e.g. tiny or albert-base")
    p.add_argument("--objective", required=True, choices=["sop", "nsp", "none"])
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--batch-size", type=int, default=32, help="global batch size (all processes together)")
    p.add_argument("--max-seq-len", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="run directory: checkpoints, log.jsonl, final weights")
    p.add_argument("--save-every", type=int, default=0, help="checkpoint every K steps (default: only at the end)")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--accumulation", type=int, default=1, help="micro-batches per step")
    p.add_argument("--no-dropout", action="store_true",
                   help="no dropout anywhere (the paper's Section 4.8 finds it helps; it also makes runs on 1 and "
                        "N processes agree, since dropout masks depend on how the batch is split)")
    p.add_argument("--data-dir", default=data_dir)
    p.set_defaults(run=pretrain)

    p = commands.add_parser("experiment", help="train (or load from the cache) the runs of chapters 8 and 9 and "
                                               "write their results")
    p.add_argument("--recipe", default="book", choices=["book", "full"], help="book (minutes, the chapters' live runs) or full (about an "
                                                    "hour on 2 cores; the results the chapters show)")
    p.add_argument("--workers", type=int, default=2, help="runs trained at once, one thread each (default 2)")
    p.add_argument("--runs-dir", default=str(Path(data_dir) / "runs"), help="the run cache (default: data/runs/)")
    p.add_argument("--out", help="results file (default: data/results/RECIPE.json)")
    p.add_argument("--data-dir", default=data_dir)
    p.set_defaults(run=experiment)

    commands.add_parser("classroom", add_help=False, help="nbgrader assignments from the chapters: build, "
                                                           "autograde (see `classroom --help`)")

    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["classroom"]:  # its own sub-commands and options
        from albert_edu.classroom import main as classroom

        return classroom(argv[1:])
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
