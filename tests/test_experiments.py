"""The run cache (keys, atomic entries, reuse), the recipes, the stored results of the full recipe, and the
`experiment` command's errors (chapter 8)."""

import ast
import json
import shutil
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest

import albert_edu.experiments as experiments
from albert_edu.corpus import DATA_DIR
from albert_edu.experiments import (RECIPES, RESULTS_DIR, Run, figure1_runs, load_result, recipe_training, run_dir,
                                    run_key, run_summary, table5_runs, train_all, train_cached)
from albert_edu.training import TrainingConfig

SMALL_MODEL = experiments.experiment_model("all")
QUICK = TrainingConfig(objective="sop", steps=3, batch_size=4, max_seq_len=32, warmup_steps=1, log_every=1)


def test_the_key_changes_with_everything_that_decides_the_weights():
    run = Run("a", SMALL_MODEL, QUICK)
    assert run_key(run) == run_key(Run("another name", SMALL_MODEL, QUICK))  # the name is not part of it
    changed = [Run("a", SMALL_MODEL, replace(QUICK, seed=1)), Run("a", SMALL_MODEL, replace(QUICK, objective="nsp")),
               Run("a", experiments.experiment_model("none"), QUICK), Run("a", SMALL_MODEL, replace(QUICK, lr=1e-3))]
    assert len({run_key(run)} | {run_key(r) for r in changed}) == 5


def test_the_key_changes_with_the_data(tmp_path):
    for name in experiments.DATA_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA_DIR / name, tmp_path / name)
    run = Run("a", SMALL_MODEL, QUICK)
    assert run_key(run, tmp_path) == run_key(run)
    with open(tmp_path / "prepared" / "validation.jsonl", "a") as f:
        f.write("\n")
    assert run_key(run, tmp_path) != run_key(run)


def test_the_key_covers_every_module_that_training_loads():
    # independent of code_files' reading of import statements: what Python actually loads to train
    loaded = subprocess.run([sys.executable, "-c", "import sys, albert_edu.training; print(sorted(m for m in "
                             "sys.modules if m.startswith('albert_edu.')))"], capture_output=True, text=True, check=True)
    modules = {m.split(".")[1] + ".py" for m in ast.literal_eval(loaded.stdout)}
    assert modules == set(experiments.CODE_FILES)
    assert {"params.py", "checkpoint.py"} <= modules


def test_the_key_changes_when_any_code_file_changes(tmp_path, monkeypatch):
    package = tmp_path / "albert_edu"
    shutil.copytree(Path(experiments.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    run = Run("a", SMALL_MODEL, QUICK)
    before = run_key(run)
    monkeypatch.setattr(experiments.albert_edu, "__file__", str(package / "__init__.py"))
    assert run_key(run) == before
    keys = set()
    for name in experiments.CODE_FILES:
        original = (package / name).read_text()
        (package / name).write_text(original + "\n# changed\n")
        keys.add(run_key(run))
        (package / name).write_text(original)
    assert len(keys) == len(experiments.CODE_FILES) and before not in keys


def test_a_cached_run_is_trained_once_and_complete(tmp_path, monkeypatch):
    run = Run("quick", SMALL_MODEL, QUICK)
    (tmp_path / f".{run_dir(run, tmp_path).name}.999.tmp").mkdir()  # what a killed attempt leaves behind
    path = train_cached(run, tmp_path)
    assert path == run_dir(run, tmp_path) and path.name.startswith("quick-")
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "log.jsonl", "model.safetensors", "result.json"]
    result = load_result(path)
    assert result["training"] == asdict(QUICK) and result["key"] == run_key(run)
    assert {"mlm_accuracy", "sop_accuracy", "nsp_accuracy", "sop_majority", "nsp_majority", "sop_balanced",
            "nsp_balanced"} <= set(result["scores"])
    assert result["scores"]["examples"] > 1000  # every held-out pair of four passes
    summary = run_summary(path, loss_every=1)
    assert [step for step, _ in summary["loss"]] == [1, 2, 3] and summary["evaluations"][-1]["step"] == 3

    def fail(*args, **kwargs):
        raise AssertionError("a cached run was trained again")

    monkeypatch.setattr(experiments, "pretrain", fail)
    assert train_cached(run, tmp_path) == path and train_all([run], tmp_path, workers=2) == [path]


def test_recipes_share_the_albert_style_run_and_reject_unknown_names():
    for recipe in RECIPES:
        runs = table5_runs(recipe)
        assert [r.training.objective for r in runs] == [o for o in ("none", "nsp", "sop") for _ in RECIPES[recipe]["seeds"]]
        assert len({r.model for r in runs}) == 1 and len({(r.training.steps, r.training.lr) for r in runs}) == 1
        styles = figure1_runs(recipe)
        assert styles["ALBERT-style"] in runs and styles["BERT-style"].model.sharing == "none"
        assert styles["BERT-style"].training == styles["ALBERT-style"].training
    with pytest.raises(ValueError, match="recipe='huge'"):
        recipe_training("huge", "sop", 0)


def test_the_sweep_varies_only_the_learning_rate_and_the_optimizer():
    runs = experiments.sweep_runs()
    assert len({r.name for r in runs}) == len(runs) == sum(map(len, experiments.SWEEP["lr"].values()))
    assert len({r.model for r in runs}) == 1 and {r.training.objective for r in runs} == {"none"}
    fixed = [replace(r.training, lr=1.0, optimizer="lamb") for r in runs]
    assert all(f == fixed[0] for f in fixed) and fixed[0].max_seq_len == 128


def test_the_stored_full_results_belong_to_the_current_full_recipe():
    results = json.loads((RESULTS_DIR / "full.json").read_text())
    assert results["command"] == "python -m albert_edu experiment --recipe full"
    assert [(r["model"], r["training"]) for r in results["table5"]] == \
        [(r.model.to_dict(), asdict(r.training)) for r in table5_runs("full")]
    for style, run in figure1_runs("full").items():
        stored = results["figure1"][style]
        assert (stored["model"], stored["training"]) == (run.model.to_dict(), asdict(run.training))
        assert len(stored["transitions"]["l2"]) == len(stored["transitions"]["angle"]) == run.model.num_hidden_layers
    for r in results["table5"]:
        assert r["evaluations"][-1]["step"] == r["training"]["steps"] and r["scores"]["examples"] > 1000
        assert 0 <= r["scores"]["sop_balanced"] <= 1 and 0 <= r["scores"]["nsp_balanced"] <= 1


def cli(*args):
    return subprocess.run([sys.executable, "-m", "albert_edu", "experiment", *args], capture_output=True, text=True)


def test_the_command_rejects_an_unknown_recipe_and_missing_data(tmp_path):
    result = cli("--recipe", "huge")
    assert result.returncode != 0 and "invalid choice: 'huge'" in result.stderr
    result = cli("--data-dir", str(tmp_path))
    assert result.returncode != 0 and "no tokenizer in" in result.stderr and "prepare-data" in result.stderr


def test_balanced_accuracy_puts_any_constant_answer_at_one_half():
    labels = [0] * 7 + [1] * 3
    assert experiments.balanced_accuracy([0] * 10, labels) == 0.5 == experiments.balanced_accuracy([1] * 10, labels)
    assert experiments.balanced_accuracy(labels, labels) == 1.0
    assert experiments.balanced_accuracy([0] * 6 + [1] * 4, labels) == pytest.approx((6 / 7 + 1) / 2)
    with pytest.raises(ValueError, match="no labels"):
        experiments.balanced_accuracy([], [])
