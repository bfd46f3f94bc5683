"""The cache of pre-training runs, the plumbing behind chapters 8-11's experiments: a run is trained once, under a
fingerprint of everything that decides its weights (both configurations with the seed, the bytes of the data and
tokenizer, and the source of `training.py` and every library module it imports), in a partial directory renamed
into the cache only when complete, so that a killed run resumes from its last checkpoint and never leaves a
half-written entry. The book's own runs are committed finished in data/checkpoints/ (`albert-edu checkpoints`), so
that no chapter trains them on a first reading. What a run is and how it is scored are chapter 8's
(albert_edu.experiments, which re-exports these names); this module only keys, trains, locks and collects."""

import ast
import hashlib
import json
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path

import torch

import albert_edu
from albert_edu.config import AlbertConfig
from albert_edu.corpus import DATA_DIR
from albert_edu.training import TrainingConfig, pretrain

RUNS_DIR = DATA_DIR / "runs"  # the cache of trained runs (not in git)
RESULTS_DIR = DATA_DIR / "results"  # results of the long recipes (in git)
# The files a run's outcome depends on besides its settings: the data, and the code that trains.
DATA_FILES = ("prepared/train.jsonl", "prepared/validation.jsonl", "tokenizer/spiece.model")


def code_files(start: str = "training") -> tuple[str, ...]:
    """The library's source files that decide a run's weights: `start` and every albert_edu module it imports,
    directly or through another, found by reading their import statements."""
    package, found, todo = Path(albert_edu.__file__).parent, set(), [start]
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            for node in ast.walk(ast.parse((package / f"{name}.py").read_text(encoding="utf-8"))):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                todo += [m.split(".")[1] for m in modules if m.startswith("albert_edu.")]
    return tuple(sorted(f"{name}.py" for name in found))


CODE_FILES = code_files()


@dataclass(frozen=True)
class Run:
    """One pre-training run: a model, how it is trained, and a name for tables and figures. A run with a
    `start` continues pre-training from the weights of that finished run (all but its pair head)."""
    name: str
    model: AlbertConfig
    training: TrainingConfig
    start: "Run | None" = None


def run_key(run: Run, data_dir: Path = DATA_DIR, device: str = "cpu", code: dict[str, bytes] | None = None) -> str:
    """A fingerprint of everything that decides the trained weights: both configurations (the seed among
    them), the bytes of the data, the source of the training code, the key of the run it starts from, and the
    kind of device when it is not the CPU (a GPU computes in other precisions). Change any of them and the run
    is new. `code`: the training code's files by name when not as they are now (an earlier commit's, which
    `albert-edu rekey` compares with)."""
    digest = hashlib.sha256()
    what = {"model": run.model.to_dict(), "training": asdict(run.training)}
    if run.start is not None:
        what["start"] = run_key(run.start, data_dir, device, code)
    if device != "cpu":
        what["device"] = device.split(":")[0]
    digest.update(json.dumps(what, sort_keys=True).encode())
    for name in DATA_FILES:
        digest.update(name.encode() + (Path(data_dir) / name).read_bytes())
    package = Path(albert_edu.__file__).parent
    for name in CODE_FILES:
        digest.update(name.encode() + (code[name] if code is not None else (package / name).read_bytes()))
    return digest.hexdigest()[:16]


def run_dir(run: Run, runs_dir: Path = RUNS_DIR, data_dir: Path = DATA_DIR, device: str = "cpu") -> Path:
    return Path(runs_dir) / f"{run.name}-{run_key(run, data_dir, device)}"


CHECKPOINTS_DIR = DATA_DIR / "checkpoints"  # finished runs that the chapters load, with their provenance (in git)


def finished_run(run: Run, runs_dir: Path = RUNS_DIR, data_dir: Path = DATA_DIR, device: str = "cpu") -> Path | None:
    """The run's finished entry under its fingerprint: in the run cache, or else among the committed checkpoints
    (read-only: the book's own runs, which a fresh copy of the book holds); None when neither has it."""
    return _finished(run_dir(run, runs_dir, data_dir, device), data_dir)


def _finished(final: Path, data_dir: Path) -> Path | None:
    """finished_run for a run whose cache entry (run_dir) is `final`: its fingerprint computed once."""
    for folder in (final.parent, Path(data_dir) / CHECKPOINTS_DIR.name):
        if (folder / final.name / "result.json").is_file():
            return folder / final.name
    return None


def train_cached(run: Run, runs_dir: Path = RUNS_DIR, data_dir: Path = DATA_DIR, threads: int | None = None,
                 device: str = "cpu") -> Path:
    """The directory of a finished run: trained now, or earlier by any chapter or command (the cache), or committed
    with the book (finished_run). Training happens in a partial directory that is renamed when complete, so a killed run leaves no
    half-written entry. The next attempt resumes the partial run from its last checkpoint (bit-exact, chapter
    7) unless another living process is training it; then this one trains its own copy from the start. A run
    with a start trains (or finds) that run first. device: where it trains (chapter 7's resolve_device; the
    scores are computed on the CPU)."""
    from albert_edu import experiments  # how a run is scored is chapter 8's; looked up when called

    final = run_dir(run, runs_dir, data_dir, device)
    found = _finished(final, data_dir)
    if found is not None:
        return found
    start = None if run.start is None else train_cached(run.start, runs_dir, data_dir, threads, device)
    tmp, lock = final.with_name(f".{final.name}.partial"), final.with_name(f".{final.name}.lock")
    final.parent.mkdir(parents=True, exist_ok=True)
    if not _claim(lock):
        tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    try:
        resumed_at = _resumable(tmp)
        started, predictions, previous = time.perf_counter(), {}, torch.get_num_threads()
        torch.set_num_threads(threads or previous)
        try:
            pretrain(run.model, run.training, tmp, resume=resumed_at > 0, data_dir=Path(data_dir), progress=False,
                     init_from=start, device=device)
            seconds = round(time.perf_counter() - started, 1)
            scores = experiments.score(tmp, data_dir, run.training.max_seq_len, predictions=predictions, pairs=run.training.pairs)
        finally:
            torch.set_num_threads(previous)  # the caller's setting, for whatever it runs next
        shutil.rmtree(tmp / "checkpoints")  # the final weights stay; the optimizer state is only for resuming
        result = {"name": run.name, "key": final.name.removeprefix(f"{run.name}-"), "model": run.model.to_dict(),
                  "training": asdict(run.training), "start": None if start is None else start.name,
                  "seconds": seconds, "resumed_at": resumed_at, "scores": scores, "predictions": predictions,
                  "scoring": experiments.scoring_key(), **({"device": device} if device != "cpu" else {})}
        (tmp / "result.json").write_text(json.dumps(result, indent=1) + "\n")
        if final.exists():  # another process finished the same run first; both are equal, keep theirs
            shutil.rmtree(tmp)
        else:
            tmp.rename(final)
    finally:
        if tmp.name.endswith(".partial"):
            lock.unlink(missing_ok=True)
    return final


def _claim(lock: Path) -> bool:
    """Take the lock file of a partial run for this process; False when a living process holds it."""
    for _ in range(2):
        try:
            with open(lock, "x") as f:
                f.write(str(os.getpid()))
            return True
        except FileExistsError:
            try:
                owner = int(lock.read_text())  # empty: its owner is writing it now
                os.kill(owner, 0)  # signal 0: only asks whether the process exists
                if owner != os.getpid():
                    return False
            except (ProcessLookupError, FileNotFoundError):
                pass
            except (ValueError, PermissionError):  # being written, or held by a process of another user
                return False
            lock.unlink(missing_ok=True)  # left by a process that died
    return False


def _resumable(partial: Path) -> int:
    """The step of the partial run's last checkpoint (its log cut back to that step), or 0 after clearing it."""
    pointer = partial / "checkpoints" / "latest"
    if not pointer.is_file():
        shutil.rmtree(partial, ignore_errors=True)
        return 0
    step = json.loads((pointer.parent / pointer.read_text().strip() / "state.json").read_text())["step"]
    log = partial / "log.jsonl"
    if log.is_file():  # the steps after the checkpoint will be trained, and logged, again
        lines = [line for line in log.read_text().splitlines(keepends=True) if json.loads(line)["step"] <= step]
        log.write_text("".join(lines))
    return step


def _train_one(name: str, model: AlbertConfig, training: TrainingConfig, start: Run | None, runs_dir: Path,
               data_dir: Path, device: str = "cpu") -> Path:
    """What a worker process of train_all runs, on one thread."""
    return train_cached(Run(name, model, training, start), runs_dir, data_dir, threads=1, device=device)


def train_all(runs: list[Run], runs_dir: Path = RUNS_DIR, data_dir: Path = DATA_DIR, workers: int = 2,
              device: str = "cpu") -> list[Path]:
    """train_cached for every run, `workers` runs at a time, each on one thread (matrices this small keep one
    thread busy better than two). The runs that others start from are trained first, each once; a lone missing
    run trains in this process on `workers` threads."""
    starts = {run_key(r.start, data_dir, device): r.start for r in runs if r.start is not None}
    if starts:
        train_all(list(starts.values()), runs_dir, data_dir, workers, device)
    # fixed now: editing the code later changes keys
    paths = [_finished(final, data_dir) or final for final in (run_dir(r, runs_dir, data_dir, device) for r in runs)]
    missing = [i for i, path in enumerate(paths) if not (path / "result.json").is_file()]
    if len(missing) > 1 and workers > 1:
        # A spawned process finds the function it runs, and the classes of its arguments, by importing them by
        # name. So it gets the library's _train_one and plain configurations, even when this cell runs in a
        # notebook, whose own definitions no other process can import.
        from albert_edu.run_cache import _train_one

        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            trained = pool.map(_train_one, *zip(*[(runs[i].name, runs[i].model, runs[i].training, runs[i].start,
                                                   runs_dir, data_dir, device) for i in missing]))
            for i, path in zip(missing, trained):
                paths[i] = path
    return [path if (path / "result.json").is_file() else train_cached(run, runs_dir, data_dir, workers, device)
            for run, path in zip(runs, paths)]
