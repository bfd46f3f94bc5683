"""The run cache (keys, atomic entries, reuse), the recipes, the stored results of the full recipe, and the
`experiment` command's errors (chapter 8)."""

import ast
import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
import torch

import albert_edu.experiments as experiments
import albert_edu.run_cache as run_cache
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
    monkeypatch.setattr(run_cache.albert_edu, "__file__", str(package / "__init__.py"))
    assert run_key(run) == before
    keys = set()
    for name in experiments.CODE_FILES:
        original = (package / name).read_text()
        (package / name).write_text(original + "\n# changed\n")
        keys.add(run_key(run))
        (package / name).write_text(original)
    assert len(keys) == len(experiments.CODE_FILES) and before not in keys


@pytest.mark.usefixtures("small_validation")  # pre-training's own evaluation; the cache's scoring is in full
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
    # the stored answers and per-document MLM sums recompute the stored scores
    pairs, predictions = experiments.held_out_pairs(max_seq_len=QUICK.max_seq_len), result["predictions"]
    for task in ("sop", "nsp"):
        answers, labels = experiments.bits(predictions[task]), experiments.bits(pairs[task]["labels"])
        assert len(answers) == len(labels) == len(pairs[task]["documents"]) == len(pairs[task]["whole"])
        assert experiments.balanced_accuracy(answers.tolist(), labels.tolist()) == \
            pytest.approx(result["scores"][f"{task}_balanced"], abs=1e-12)
    mlm = predictions["mlm_by_document"]
    assert mlm["documents"] == sorted(set(pairs["sop"]["documents"]))
    assert sum(mlm["right"]) / sum(mlm["count"]) == pytest.approx(result["scores"]["mlm_accuracy"], abs=1e-12)
    assert sum(mlm["loss"]) / sum(mlm["count"]) == pytest.approx(result["scores"]["mlm_loss"], abs=1e-5)

    def fail(*args, **kwargs):
        raise AssertionError("a cached run was trained again")

    monkeypatch.setattr(run_cache, "pretrain", fail)
    assert train_cached(run, tmp_path) == path and train_all([run], tmp_path, workers=2) == [path]

    # the scores train_cached stored are reused while the scoring code is the same, and made again when not
    import albert_edu.analysis as analysis

    def scored_again(*args, **kwargs):
        raise AssertionError("a stored score was made again")

    monkeypatch.setattr(analysis, "score", scored_again)
    assert result["scoring"] == experiments.scoring_key()
    assert analysis._scored_summary(path, DATA_DIR, QUICK.max_seq_len)["predictions"] == result["predictions"]
    monkeypatch.setattr(analysis, "scoring_key", lambda: "other scoring code")
    with pytest.raises(AssertionError, match="made again"):
        analysis._scored_summary(path, DATA_DIR, QUICK.max_seq_len)


@pytest.fixture
def quick_scores(small_validation, monkeypatch):
    """The run cache's scoring on one pass over the held-out documents instead of four, and pre-training's own
    evaluation on 32 examples a task: for the tests of resuming and locking, which compare two runs' scores or
    ignore them (test_a_cached_run_is_trained_once_and_complete scores in full)."""
    score = experiments.score

    def one_pass(*args, **kwargs):
        return score(*args, **{**kwargs, "passes": 1})

    monkeypatch.setattr(experiments, "score", one_pass)


@pytest.mark.usefixtures("quick_scores")
def test_a_killed_run_resumes_from_its_last_checkpoint_to_the_same_weights_and_log(tmp_path):
    from safetensors.torch import load_file

    run = Run("resumable", SMALL_MODEL, replace(QUICK, steps=6, save_every=2))
    whole = train_cached(run, tmp_path / "whole")
    killed = run_dir(run, tmp_path / "killed")
    partial = killed.with_name(f".{killed.name}.partial")
    run_cache.pretrain(run.model, run.training, partial, progress=False, stop_after=5)  # killed at step 5
    assert train_cached(run, tmp_path / "killed") == killed and not partial.exists()
    assert load_result(whole)["resumed_at"] == 0 and load_result(killed)["resumed_at"] == 4  # the last checkpoint
    ours, theirs = load_file(whole / "model.safetensors"), load_file(killed / "model.safetensors")
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    logged = [[(r["step"], r.get("loss")) for r in map(json.loads, (path / "log.jsonl").read_text().splitlines())]
              for path in (whole, killed)]
    assert logged[0] == logged[1] and [step for step, loss in logged[0] if loss is not None] == [1, 2, 3, 4, 5, 6]
    assert load_result(killed)["scores"] == load_result(whole)["scores"]


@pytest.mark.usefixtures("quick_scores")
def test_a_partial_run_held_by_a_living_process_is_left_alone_and_a_dead_ones_is_taken(tmp_path):
    run = Run("quick", SMALL_MODEL, QUICK)
    final = run_dir(run, tmp_path)
    partial, lock = final.with_name(f".{final.name}.partial"), final.with_name(f".{final.name}.lock")
    partial.mkdir(parents=True)
    (partial / "theirs").write_text("")
    lock.write_text(str(os.getppid()))  # alive, and not this process
    assert (train_cached(run, tmp_path) / "result.json").is_file()
    assert (partial / "theirs").exists() and lock.read_text() == str(os.getppid())
    assert not list(tmp_path.glob(f".{final.name}.*.tmp"))  # this process's own copy became the entry
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock.write_text(dead.stdout.strip())
    assert run_cache._claim(lock) and lock.read_text() == str(os.getpid())


def test_a_linear_probe_finds_a_direction_that_separates_the_labels_and_needs_both_labels():
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(400, 6, generator=generator)
    labels = (features[:, 2] - 0.5 * features[:, 4] > 0.3).long().tolist()  # linearly separable, unevenly split
    rule = experiments.fit_probe(features * 10 + 3, labels)  # standardized inside: the scale does not matter
    assert experiments.balanced_accuracy(rule(features * 10 + 3), labels) > 0.97
    with pytest.raises(ValueError, match=r"labels hold \[1\]: a probe needs both 0 and 1"):
        experiments.fit_probe(features, [1] * 400)


def test_a_product_read_lets_a_linear_probe_ask_whether_the_segments_agree():
    generator = torch.Generator().manual_seed(0)
    cls, a, b = (torch.randn(2000, 8, generator=generator) for _ in range(3))
    labels = ((a * b).sum(1) > 0).long().tolist()  # 1 when the two segment means point the same way
    train, test = slice(0, 1500), slice(1500, None)

    def score(name):
        read = experiments.PROBE_READS[name]
        rule = experiments.fit_probe(read(cls[train], a[train], b[train]), labels[train])
        return experiments.balanced_accuracy(rule(read(cls[test], a[test], b[test])), labels[test])

    assert score("[CLS], mean A, mean B") < 0.6  # a linear rule on the means cannot see agreement
    assert score("and A * B, |A - B|") > 0.9 and score("cosine of mean A and mean B") > 0.9
    assert score("[CLS] alone") < 0.6


def test_pair_features_read_cls_and_the_two_segments_in_order():
    from albert_edu.model import AlbertModel
    from albert_edu.pretraining_data import Example

    torch.manual_seed(0)
    model = AlbertModel(SMALL_MODEL)
    pair = Example([2, 50, 51, 3, 60, 61, 62, 3], [0, 0, 0, 0, 1, 1, 1, 1], [], [], 0)
    short = Example([2, 70, 3, 71, 3], [0, 0, 0, 1, 1], [], [], 1)
    features = experiments.pair_features(model, [pair, short], batch_size=1)
    assert features.shape == (2, 3 * SMALL_MODEL.hidden_size)
    assert model.training  # pair_features reads without dropout, and leaves the model as it found it
    with torch.no_grad():
        h = model.eval()(torch.tensor([pair.input_ids]), token_type_ids=torch.tensor([pair.token_type_ids])).last_hidden_state[0]
    expected = torch.cat([h[0], h[:4].mean(0), h[4:].mean(0)])
    assert torch.allclose(features[0], expected, atol=1e-5)
    together = experiments.pair_features(model, [pair, short], batch_size=2)  # padding changes nothing
    assert torch.allclose(together, features, atol=1e-5)


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


def test_the_stored_pilot_results_belong_to_the_current_pilot_recipe():
    results = json.loads((RESULTS_DIR / "pilot.json").read_text())
    assert results["recipe"] == "pilot" and "renamed 'pilot'" in results["note"]
    assert [(r["model"], r["training"]) for r in results["table5"]] == \
        [(r.model.to_dict(), asdict(r.training)) for r in table5_runs("pilot")]
    for style, run in figure1_runs("pilot").items():
        stored = results["figure1"][style]
        assert (stored["model"], stored["training"]) == (run.model.to_dict(), asdict(run.training))
        assert len(stored["transitions"]["l2"]) == len(stored["transitions"]["angle"]) == run.model.num_hidden_layers
    for r in results["table5"]:
        assert r["evaluations"][-1]["step"] == r["training"]["steps"] and r["scores"]["examples"] > 1000
        assert 0 <= r["scores"]["sop_balanced"] <= 1 and 0 <= r["scores"]["nsp_balanced"] <= 1


def check_stored_recipe(results: dict, recipe: str) -> None:
    """A stored results file of a recipe with trunks: its runs are the recipe's, three seeds each, and the stored
    answers recompute the stored scores."""
    assert results["recipe"] == recipe and results["command"] == f"albert-edu experiment --recipe {recipe}"
    runs = table5_runs(recipe)
    assert len({r.training.seed for r in runs}) == 3

    def weights_settings(training: dict) -> dict:  # save_every changes no weight (test_training); full gained it later
        return {k: v for k, v in training.items() if k != "save_every"}

    assert [(r["model"], weights_settings(r["training"])) for r in results["table5"]] == \
        [(r.model.to_dict(), weights_settings(asdict(r.training))) for r in runs]
    [diagnostic] = experiments.diagnostic_runs(recipe)
    assert [(r["model"], weights_settings(r["training"])) for r in results["diagnostic"]] == \
        [(diagnostic.model.to_dict(), weights_settings(asdict(diagnostic.training)))]
    pairs = results["pairs"]["128"]
    for r in results["table5"] + results["diagnostic"]:
        for task in ("sop", "nsp"):  # the stored answers recompute the stored scores
            answers, labels = experiments.bits(r["predictions"][task]), experiments.bits(pairs[task]["labels"])
            assert len(answers) == len(labels) == len(pairs[task]["documents"]) == len(pairs[task]["whole"])
            assert experiments.balanced_accuracy(answers.tolist(), labels.tolist()) == pytest.approx(r["scores"][f"{task}_balanced"])
        mlm = r["predictions"]["mlm_by_document"]
        assert sum(mlm["right"]) / sum(mlm["count"]) == pytest.approx(r["scores"]["mlm_accuracy"])
    assert {t["training"]["objective"] for t in results["trunks"]} == {"none"} and len(results["trunks"]) == 2
    assert {t["training"]["pairs"] for t in results["trunks"]} == {RECIPES[recipe]["pairs"]}
    for style, sharing in (("BERT-style", "none"), ("ALBERT-style", "all")):
        seeds = results["figure1_seeds"][style]
        assert [s["seed"] for s in seeds] == [0, 1, 2]
        assert all(len(s["transitions"]["l2"]) == 6 for s in seeds)
        assert all(len(s["unrolled"]["48"]["l2"]) == 48 and len(s["unrolled"]["200"]["l2"]) == 200
                   and s["unrolled"]["200"]["l2"][:48] == pytest.approx(s["unrolled"]["48"]["l2"], rel=1e-6)
                   for s in seeds) if sharing == "all" else \
            all("unrolled" not in s for s in seeds)


def check_stored_probe(probe: dict, pairs: str, held: dict) -> None:
    """Linear probes as experiments.probe returns them: three seeds, an answer to every held-out pair."""
    assert probe["pairs"] == pairs and probe["seeds"] == [0, 1, 2]
    for task in ("sop", "nsp"):
        assert len(probe[task]["answers"]) == 3 and len(probe[task]["train_balanced"]) == 3
        assert all(len(a) == len(held[task]["labels"]) == len(held[task]["documents"]) and set(a) <= {"0", "1"}
                   for a in probe[task]["answers"])


def check_stored_reads(reads: dict, recipe: str, pairs: str, probe: dict, held: dict) -> None:
    """probe_reads of a recipe's trunk: every read of PROBE_READS stored like a probe, and the read that `probe`
    uses gives the stored probe's answers."""
    assert reads["trunk"] == f"trunk-{recipe}" and reads[pairs]["reads"] == list(experiments.PROBE_READS)
    for task in ("sop", "nsp"):
        for name in experiments.PROBE_READS:
            check_stored_probe({"pairs": pairs, "seeds": reads[pairs]["seeds"], "sop": reads[pairs][task][name],
                                "nsp": reads[pairs][task][name]}, pairs, {"sop": held[task], "nsp": held[task]})
        assert reads[pairs][task]["[CLS], mean A, mean B"]["answers"] == probe[task]["answers"]


def test_the_stored_full_results_hold_three_seeds_and_every_answer():
    results = json.loads((RESULTS_DIR / "full.json").read_text())
    check_stored_recipe(results, "full")
    assert [a["what"].split(":")[0] for a in results["added"]] == [
        "figure1_seeds ALBERT-style unrolled to 200 applications", "training.pairs = 'reference' in every run's settings",
        "probes", "probe_reads"]
    probes = results["probes"]
    assert probes["trunk"] == "trunk-full"
    for name, held in (("reference", results["pairs"]["128"]), ("neutral", probes["held_out_pairs_neutral"])):
        check_stored_probe(probes[name], name, held)
    check_stored_reads(results["probe_reads"], "full", "reference", probes["reference"], results["pairs"]["128"])


def test_the_stored_neutral_results_are_the_full_recipe_on_neutral_pairs():
    results = json.loads((RESULTS_DIR / "neutral.json").read_text())
    check_stored_recipe(results, "neutral")
    assert [a["what"].split(":")[0] for a in results["added"]] == ["probes", "probe_reads"]
    assert results["probes"]["trunk"] == "trunk-neutral"
    check_stored_probe(results["probes"]["neutral"], "neutral", results["pairs"]["128"])
    check_stored_reads(results["probe_reads"], "neutral", "neutral", results["probes"]["neutral"], results["pairs"]["128"])
    # the same held-out documents as the full recipe's, cut the neutral way
    full = json.loads((RESULTS_DIR / "full.json").read_text())
    assert results["pairs"]["128"] == full["probes"]["held_out_pairs_neutral"]
    assert set(results["pairs"]["128"]["sop"]["documents"]) == set(full["pairs"]["128"]["sop"]["documents"])


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


def test_the_bootstrap_resamples_documents_alike_for_any_pairs():
    weights = experiments.bootstrap_weights([5, 5, 9, 7, 7, 7], draws=500, seed=1)
    assert weights.shape == (501, 6) and (weights[0] == 1).all()
    assert (weights[:, 0] == weights[:, 1]).all() and (weights[:, 3] == weights[:, 5]).all()  # pairs of one document
    per_document = experiments.bootstrap_weights([5, 7, 9], draws=500, seed=1)
    assert (per_document.sum(1) == 3).all()  # three documents drawn each time
    assert (per_document[:, [0, 0, 2, 1, 1, 1]] == weights).all()  # same seed, same documents drawn
    with pytest.raises(ValueError, match="draws=0"):
        experiments.bootstrap_weights([1, 2], draws=0)


def test_the_two_way_bootstrap_weighs_a_pair_by_both_of_its_documents():
    first, second = [5, 5, 9, 7], [5, 9, 9, 5]
    weights = experiments.bootstrap_weights(first, draws=500, seed=1, second=second)
    per_document = experiments.bootstrap_weights([5, 7, 9], draws=500, seed=1)  # the same draws of documents
    assert (weights[0] == 1).all()
    assert (weights[:, 0] == per_document[:, 0]).all() and (weights[:, 2] == per_document[:, 2]).all()  # one document
    assert (weights[:, 1] == per_document[:, 0] * per_document[:, 2]).all()  # A from 5, B from 9: both must be drawn
    assert (weights[:, 3] == per_document[:, 1] * per_document[:, 0]).all()
    assert (experiments.bootstrap_weights(first, draws=50, second=first) == experiments.bootstrap_weights(first, draws=50)).all()
    with pytest.raises(ValueError, match="3 second documents for 4 pairs"):
        experiments.bootstrap_weights(first, second=second[:3])
    # an item whose candidates come from several documents (chapter 10) weighs the product over all of them
    several = experiments.bootstrap_weights(first, draws=500, seed=1, second=[[5, 9], [9, 7, 9], [9], [7, 5, 9]])
    assert (several[:, 0] == weights[:, 1]).all() and (several[:, 2] == per_document[:, 2]).all()
    assert (several[:, 1] == per_document[:, 0] * per_document[:, 1] * per_document[:, 2]).all()
    assert (several[:, 3] == several[:, 1]).all()


def test_the_replay_finds_every_scored_pairs_documents():
    replayed = experiments.second_documents(max_seq_len=64, passes=1)
    scored = experiments.held_out_pairs(max_seq_len=64, passes=1)
    for task in ("sop", "nsp"):
        first, second = replayed[task]
        assert first == scored[task]["documents"] and len(second) == len(first)
        elsewhere = [a != b for a, b in zip(first, second)]
        # SOP's B is A's neighbour; NSP's B is from another document exactly when the label says so
        assert elsewhere == ([False] * len(first) if task == "sop" else [y == "1" for y in scored[task]["labels"]])


def test_weighted_balanced_accuracy_is_balanced_accuracy_under_unit_weights_and_takes_shares():
    answers, labels = [0, 1, 1, 0, 1, 0, 0], [0, 1, 0, 0, 1, 1, 0]
    weights = experiments.bootstrap_weights([0, 0, 1, 1, 2, 2, 3], draws=50)
    scores = experiments.weighted_balanced_accuracy(answers, labels, weights)
    assert scores[0] == pytest.approx(experiments.balanced_accuracy(answers, labels))
    # a pair counted twice weighs like two copies of it
    doubled = experiments.weighted_balanced_accuracy(answers, labels, np.array([[2, 1, 1, 1, 1, 1, 1]]))[0]
    assert doubled == pytest.approx(experiments.balanced_accuracy([0] + answers, [0] + labels))
    # each pair's share of seeds answering 1: the mean of the seeds' own balanced accuracies
    seeds = [[0, 1, 1, 0, 1, 0, 0], [1, 1, 0, 0, 0, 1, 0]]
    share = [sum(a) / 2 for a in zip(*seeds)]
    assert experiments.weighted_balanced_accuracy(share, labels, np.ones((1, 7)))[0] == \
        pytest.approx(sum(experiments.balanced_accuracy(s, labels) for s in seeds) / 2)
    # a draw with no pair of one label has no balanced accuracy, and no interval is made from such draws
    missing = experiments.weighted_balanced_accuracy(answers, labels, np.array([[1] * 7, [0, 1, 0, 0, 1, 1, 0]]))
    assert np.isnan(missing[1]) and not np.isnan(missing[0])
    with pytest.raises(ValueError, match="1 of 1 bootstrap replicates are NaN"):
        experiments.interval(missing)


def test_clustered_mcnemar_counts_documents_not_pairs():
    # 40 pairs where only A is right, all in one document, and 10 where only B is right, spread over ten:
    # counting pairs this is overwhelming (p < 1e-4), counting documents it is one document against ten
    right_a = [1] * 40 + [0] * 10
    right_b = [0] * 40 + [1] * 10
    documents = [0] * 40 + list(range(1, 11))
    b, c = 40, 10
    assert math.erfc(math.sqrt((b - c) ** 2 / (b + c) / 2)) < 1e-4
    statistic, p = experiments.clustered_mcnemar(right_a, right_b, documents)
    assert statistic == pytest.approx(30 ** 2 / (40 ** 2 + 10)) and p > 0.3
    # with one pair per document it is the plain McNemar statistic
    assert experiments.clustered_mcnemar(right_a, right_b, list(range(50)))[0] == pytest.approx((b - c) ** 2 / (b + c))
    assert experiments.clustered_mcnemar([1, 0], [1, 0], [0, 1]) == (0.0, 1.0)  # no disagreement, no evidence
    assert experiments.clustered_mcnemar(right_b, right_a, documents)[0] == pytest.approx(statistic)


def test_sign_flip_test_is_exact_for_few_documents_and_calibrated_under_no_difference():
    # three documents: 8 sign patterns, of which two (all +, all -) are as extreme as the data
    differences, documents = [1.0, 0.5, 2.0, 1.5], [0, 0, 1, 2]  # per document: 1.5, 2.0, 1.5
    statistic, p = experiments.sign_flip_test(differences, documents, draws=40_000)
    assert statistic == pytest.approx(5.0 ** 2 / (1.5 ** 2 + 2.0 ** 2 + 1.5 ** 2))
    assert p == pytest.approx(2 / 8, abs=0.01)
    assert experiments.sign_flip_test([0.0, 0.0], [0, 1]) == (0.0, 1.0)  # no difference, no evidence
    assert experiments.sign_flip_test(differences, documents, seed=3) == experiments.sign_flip_test(differences, documents, seed=3)
    # under no difference (symmetric per-document differences of uneven size) p < 0.05 about 5% of the time
    rng = np.random.default_rng(0)
    sizes = rng.pareto(1.5, 40) + 0.1
    rejections = [experiments.sign_flip_test(sizes * rng.choice([-1, 1], 40), range(40), draws=999, seed=i)[1] < 0.05
                  for i in range(300)]
    assert 0.02 < np.mean(rejections) < 0.09
    # a real shift is found
    assert experiments.sign_flip_test(sizes + 0.5, range(40), draws=999)[1] < 0.01


def test_sign_flip_test_refuses_mismatched_documents_and_no_draws():
    with pytest.raises(ValueError, match="2 documents for 3 differences"):
        experiments.sign_flip_test([1.0, 2.0, 3.0], [0, 1])
    with pytest.raises(ValueError, match="draws=0"):
        experiments.sign_flip_test([1.0], [0], draws=0)


def test_clustered_mcnemar_on_balanced_accuracy_ignores_a_preference_for_the_commoner_label():
    labels = np.array([0] * 58 + [1] * 42)
    documents = list(np.arange(100) % 10)
    always_0, always_1 = np.zeros(100, int), np.ones(100, int)  # two constant heads: balanced accuracy 50% each
    assert experiments.clustered_mcnemar(always_0 == labels, always_1 == labels, documents)[1] < 0.01  # raw accuracy
    assert experiments.clustered_mcnemar(always_0 == labels, always_1 == labels, documents, labels)[1] > 0.99
    better = always_0.copy()
    better[58:] = 1  # right on every pair
    assert experiments.clustered_mcnemar(better == labels, always_0 == labels, documents, labels)[1] < 0.01


def test_holm_multiplies_the_ith_smallest_p_by_m_minus_i_plus_1_and_keeps_the_order():
    adjusted = experiments.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.5})
    assert adjusted == pytest.approx({"a": 0.04, "b": 0.09, "c": 0.09, "d": 0.5})  # b: 0.04 x 2, but not below c
    assert list(adjusted) == ["a", "b", "c", "d"]  # keyed as given
    assert experiments.holm({"only": 0.03}) == {"only": 0.03}  # one test pays nothing
    assert experiments.holm({"a": 0.4, "b": 0.9}) == {"a": 0.8, "b": 0.9}
    assert experiments.holm({"a": 0.6, "b": 0.7}) == {"a": 1.0, "b": 1.0}  # capped at 1
    with pytest.raises(ValueError, match=r"p-values \{'b': 1.5\}: expected numbers from 0 to 1"):
        experiments.holm({"a": 0.1, "b": 1.5})


def test_surface_features_read_lengths_and_sentence_ends_before_masking():
    from albert_edu.pretraining_data import Example
    from albert_edu.tokenizer import Tokenizer

    tokenizer = Tokenizer.load()
    a, b = tokenizer.encode("It rained. Then it stopped."), tokenizer.encode("The sun came out")
    ids, types = tokenizer.encode_pair(a, b)
    dot = ids.index(tokenizer.encode("It rained.")[-1])
    masked = list(ids)
    masked[dot] = tokenizer.mask_id  # masking the first sentence end hides nothing from the features
    example = Example(masked, types, [dot], [ids[dot]], 0)
    row = experiments.surface_features([example], tokenizer, max_seq_len=len(ids))[0].tolist()
    assert row == pytest.approx([len(a), len(b), math.log(len(b) / len(a)), 1.0, 1.0, 0.0, 2.0, 0.0])
    assert experiments.surface_features([example], tokenizer, max_seq_len=len(ids) + 1)[0, 3] == 0  # not full
    empty_b = Example([2, 50, 3, 3], [0, 0, 0, 1], [], [], 0)
    with pytest.raises(ValueError, match="segments of 1 and 0 pieces"):
        experiments.surface_features([empty_b], tokenizer, max_seq_len=8)


def test_predict_splits_the_mlm_sums_by_example():
    from albert_edu import AlbertForPreTraining
    from albert_edu.corpus import load_documents
    from albert_edu.tokenizer import Tokenizer
    from albert_edu.training import predict, validation_examples

    torch.manual_seed(0)
    model = AlbertForPreTraining(SMALL_MODEL)
    examples = validation_examples(load_documents("validation"), Tokenizer.load(), 32, max_examples=23)["sop"]
    together = predict(model, examples, batch_size=7)
    assert len(together["mlm_right_each"]) == len(together["mlm_loss_each"]) == 23
    for i in (0, 11, 22):  # each example alone gives its own entry
        alone = predict(model, examples[i:i + 1])
        assert alone["mlm_right_each"] == [together["mlm_right_each"][i]]
        assert alone["mlm_loss_each"][0] == pytest.approx(together["mlm_loss_each"][i], rel=1e-5)
    assert together["mlm_total"] == sum(len(e.mlm_positions) for e in examples)
    assert together["mlm_right"] == sum(together["mlm_right_each"])


def test_the_full_recipe_continues_one_trunk_per_geometry_with_three_seeds_per_objective():
    runs, trunk = table5_runs("full"), experiments.trunk_run("full")
    assert trunk.training.objective == "none" and trunk.training.steps > runs[0].training.steps
    assert all(r.start == trunk for r in runs) and {r.training.max_seq_len for r in runs} == {128}
    for objective in ("none", "nsp", "sop"):
        assert sorted(r.training.seed for r in runs if r.training.objective == objective) == [0, 1, 2]
    [diagnostic] = experiments.diagnostic_runs("full")
    assert diagnostic.training.mlm_weight == 0 and diagnostic.training.objective == "sop" and diagnostic.start == trunk
    for seed in (0, 1, 2):  # chapter 9's pairs of models, one per seed, the ALBERT-style one a Table 5 run
        styles = figure1_runs("full", seed)
        assert styles["BERT-style"].start == experiments.trunk_run("full", "none") and styles["ALBERT-style"] in runs
        assert styles["BERT-style"].training == styles["ALBERT-style"].training and styles["BERT-style"].training.seed == seed
    assert experiments.trunk_run("book") is None and experiments.diagnostic_runs("book") == []
    # the key of a continued run covers its trunk
    assert run_key(runs[0]) != run_key(replace(runs[0], start=experiments.trunk_run("full", "none")))


def test_the_unigram_yardstick_is_add_one_smoothed_frequencies_and_refuses_ids_outside_the_vocabulary():
    log_p = experiments.unigram_log_p([2, 2, 2, 0], 4)  # counts 1, 0, 3, 0 -> 2, 1, 4, 1 after adding one
    assert np.allclose(np.exp(log_p), [2 / 8, 1 / 8, 4 / 8, 1 / 8]) and np.isclose(np.exp(log_p).sum(), 1)
    assert np.allclose(np.exp(experiments.unigram_log_p([], 5)), 0.2)  # no counts: uniform
    for ids in ([0, 4], [-1]):
        with pytest.raises(ValueError, match=r"piece ids from -?\d+ to -?\d+: expected 0 to 3"):
            experiments.unigram_log_p(ids, 4)
