"""The checkpoints committed with the book (data/checkpoints/): finished runs that the chapters load instead of
training them on a first reading, each with the record of how it was made.

    albert-edu checkpoints [--workers N] [--check]

trains the book's runs (or takes them from the run cache), copies each into data/checkpoints/ under its fingerprint
(the run cache's name for it, chapter 8's run_key: settings, data and training code) with a provenance.json (the
command, the commit, the machine, the minutes of training, the tokens seen, the held-out scores and the sha256 of each
file), and removes the entries that older code or data made. `--check` only reports what is out of date. The tests
check the entries against today's code and re-train the first steps of each against its committed log.
"""

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

from albert_edu.tools.manifest import ROOT

FILES = ("config.json", "log.jsonl", "model.safetensors", "result.json")
COMMAND = "albert-edu checkpoints"
OTHERS = ("albert-book", "albert-book-1800")  # entries that another command makes and checks: `albert-edu pretrain-book` (book_model.py)


def book_runs() -> list:
    """The runs the chapters load: chapter 8's book-recipe Table 5 runs and chapter 9's BERT-style partner (chapters
    8-10), and the all-shared E = 8 cell of chapter 11's book grid, which exercise 11.3 asks for."""
    from albert_edu.ablations import ablation_model, ablation_training
    from albert_edu.experiments import Run, figure1_runs, table5_runs

    return table5_runs("book") + [figure1_runs("book")["BERT-style"],
                                  Run("ablation-all-E8-s0-book", ablation_model(8, "all"), ablation_training("book", 0))]


def checkpoints_dir() -> Path:
    from albert_edu.experiments import CHECKPOINTS_DIR

    return CHECKPOINTS_DIR


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def commit() -> str:
    """The commit of the code that trained, with "-dirty" when the work tree had changes; "unknown" outside git."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=ROOT, capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def provenance(path: Path, machine: str, code: str) -> dict:
    """How a finished run was made, from its result.json, and the sha256 of each of its files."""
    from albert_edu.experiments import load_result

    result = load_result(path)
    training = result["training"]
    return {"command": COMMAND, "commit": code, "machine": machine, "device": result.get("device", "cpu"),
            "minutes": round(result["seconds"] / 60, 1),
            "tokens_seen": training["steps"] * training["batch_size"] * training["max_seq_len"],
            "held_out": result["scores"], "sha256": {name: sha256(path / name) for name in FILES}}


def entry_of(name: str, folder: Path) -> list[Path]:
    """The entries of a run name in `folder`: NAME-KEY with a 16-digit key (so "sop-s0-book" leaves
    "sop-s0-book-unshared-..." alone)."""
    return [p for p in folder.glob(f"{name}-*") if re.fullmatch(re.escape(name) + r"-[0-9a-f]{16}", p.name)]


def save(runs: list, workers: int = 2, folder: Path | None = None) -> list[Path]:
    """Train the runs (or take them from the cache) and commit each to `folder` (data/checkpoints/), replacing the
    entries of the same runs that other code or data made. Each entry is written beside its place and renamed."""
    import os
    import platform

    from albert_edu.experiments import train_all

    folder = Path(folder or checkpoints_dir())
    folder.mkdir(parents=True, exist_ok=True)
    machine, code = f"{platform.machine()}, {os.cpu_count()} cores", commit()
    saved = []
    for run, path in zip(runs, train_all(runs, workers=workers)):
        target = folder / path.name
        if path.resolve() != target.resolve():
            tmp = folder / f".{path.name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            for name in FILES:
                shutil.copyfile(path / name, tmp / name)
            (tmp / "provenance.json").write_text(json.dumps(provenance(tmp, machine, code), indent=1) + "\n")
            for old in entry_of(run.name, folder):
                shutil.rmtree(old)
            tmp.rename(target)
        saved.append(target)
    return saved


def problems(runs: list, folder: Path | None = None) -> list[str]:
    """What is wrong with the committed entries of `runs`: missing under today's fingerprint (the code or data
    changed since they were made), a file that differs from its recorded sha256, or an entry of no such run."""
    from albert_edu.experiments import run_dir

    folder = Path(folder or checkpoints_dir())
    found = []
    expected = {run.name: run_dir(run, folder).name for run in runs}  # each key hashes the data and the code: once
    for name, entry in expected.items():
        if not (folder / entry).is_dir():
            found.append(f"{name}: no entry under today's fingerprint {entry} (the training code or the data changed "
                         f"since it was made); run `{COMMAND}`")
    for entry in sorted(p for p in folder.iterdir() if p.is_dir() and p.name not in OTHERS) if folder.is_dir() else []:
        if entry.name not in expected.values():
            found.append(f"{entry.name}: not a run the chapters load today; run `{COMMAND}`, which removes it")
            continue
        recorded = json.loads((entry / "provenance.json").read_text())["sha256"]
        changed = [name for name in FILES if sha256(entry / name) != recorded.get(name)]
        if changed:
            found.append(f"{entry.name}: {changed} differ from the sha256 in its provenance.json")
    return found
