"""Chapter 11's library (albert_edu.ablations): the grid's recipes, the operation count behind Table 2, the
comparisons that read the grid, and unrolling a shared model to other depths."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from albert_edu.ablations import (ABLATION_RECIPES, STRATEGY_E, TABLE6_FILE, TABLE6_RATES, THROUGHPUT_FILE,
                                  THROUGHPUT_MODELS, WIDE_STEP_COST, ablation_model, ablation_runs, ablation_training,
                                  cell_documents, cell_scores, check_ablation_recipe, compare, depth_scores,
                                  forward_flops, grid_runs, load_throughput, measure_throughput, plan, read_plan,
                                  table6_run, unique_runs, welch)
from albert_edu.config import AlbertConfig
from albert_edu.corpus import DATA_DIR
from albert_edu.experiments import RESULTS_DIR, run_dir, run_key
from albert_edu.model import AlbertForPreTraining


def test_the_grid_varies_one_thing_per_table_and_trains_a_shared_run_once():
    grid = ablation_runs("full")
    runs = unique_runs(grid)
    assert len(runs) == len({r.name for r in runs}) == 36
    assert len({run_key(r) for r in runs}) == 36  # no two cells are the same run under two names
    assert grid["table4"]["all"] is grid["table3"][f"all E={STRATEGY_E}"] is grid["dropout"]["off"]
    assert grid["table6"]["BERT-style"] is grid["table3"]["none E=128"]
    for table, cells in grid.items():
        for cell, cell_runs in cells.items():
            assert [r.training.seed for r in cell_runs] == [0, 1, 2], (table, cell)
            # everything but the model is the same in every cell, bar the wide model's steps (equal time)
            trainings = {json.dumps({**r.training.__dict__, "seed": 0, "steps": 0, "warmup_steps": 0, "eval_every": 0})
                         for r in cell_runs}
            assert len(trainings) == 1
    wide = grid["table6"]["ALBERT-style wide"][0]
    assert wide.training.steps == round(ABLATION_RECIPES["full"]["steps"] / WIDE_STEP_COST)
    assert wide.model.hidden_size == 256 and wide.model.sharing == "all"
    on = grid["dropout"]["on"][0].model
    assert on.hidden_dropout_prob == on.attention_probs_dropout_prob == 0.1
    assert grid["dropout"]["off"][0].model.hidden_dropout_prob == 0.0


def test_unknown_recipes_are_refused_by_name():
    with pytest.raises(ValueError, match=r"recipe='huge': expected one of \['book', 'full'\]"):
        check_ablation_recipe("huge")
    with pytest.raises(ValueError, match="recipe='huge'"):
        ablation_training("huge", 0)


@pytest.mark.parametrize("sharing", ["all", "none"])
@pytest.mark.parametrize("embedding_size", [16, 128])
def test_forward_flops_match_what_torch_counts(sharing, embedding_size):
    config = AlbertConfig.from_preset("tiny", hidden_size=128, num_attention_heads=2, intermediate_size=512,
                                      embedding_size=embedding_size, sharing=sharing)
    length, masked = 80, 12  # 12 of 80 positions: exactly 15%
    model = AlbertForPreTraining(config).eval()
    ids = torch.randint(5, config.vocab_size, (1, length))
    labels = torch.full_like(ids, -100)
    labels[0, :masked] = ids[0, :masked]
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(ids, labels=labels)
    counted = counter.get_total_flops()
    # torch's counter does not count the CPU's fused attention kernel: the position-to-position products,
    # 2 * 2 * T * T * H per layer (their growth with T is tested below)
    ours = forward_flops(config, length)["total"] - config.num_hidden_layers * 4 * length ** 2 * config.hidden_size
    pooler = 2 * config.hidden_size ** 2 + 2 * 2 * config.hidden_size  # the pooler and pair head: left out
    assert counted - pooler == pytest.approx(ours, rel=1e-9)


def test_sharing_changes_no_operations_and_the_attention_term_grows_with_the_square_of_the_length():
    c = AlbertConfig.from_preset("albert-large")
    assert forward_flops(c, 128) == forward_flops(AlbertConfig.from_preset("albert-large", sharing="none"), 128)
    a = [forward_flops(c, t)["attention"] for t in (256, 512, 768)]
    # equal steps in T: the linear term's second difference is 0, the quadratic's 2 * 2 * H * 2 * 256^2 per layer
    assert (a[2] - a[1]) - (a[1] - a[0]) == c.num_hidden_layers * 4 * c.hidden_size * 2 * 256 ** 2


def fake_results(losses: dict, documents=tuple(range(8)), count=(10, 20, 30, 40, 10, 20, 30, 40)) -> dict:
    """A results file of the shape ablation_results writes, with given per-document loss sums per run."""
    runs, cells = {}, {}
    for (table, cell), per_seed in losses.items():
        names = []
        for seed, loss in enumerate(per_seed):
            name = f"{table}-{cell}-s{seed}"
            runs[name] = {"predictions": {"mlm_by_document": {"documents": list(documents), "count": list(count),
                                                                "loss": list(loss), "right": [1] * len(documents)}},
                          "scores": {"sop_balanced": 0.5}}
            names.append(name)
        cells.setdefault(table, {})[cell] = names
    return {"recipe": "full", "cells": cells, "runs": runs}


def test_compare_is_paired_and_reads_the_paper_direction_as_positive():
    base = [[10.0, 20, 30, 40] * 2, [11, 21, 31, 41] * 2, [9, 19, 29, 39] * 2]
    worse = [[x + 2 * c for x, c in zip(row, (10, 20, 30, 40) * 2)] for row in base]  # 2 nats more per piece
    r = fake_results({("t", "a"): worse, ("t", "b"): base})
    out = compare(r, {("t", "a"): 1}, {("t", "b"): 1}, draws=200)
    assert out["difference"] == pytest.approx(2.0)
    assert out["interval"][0] == pytest.approx(2.0) and out["interval"][1] == pytest.approx(2.0)  # paired: no noise
    assert out["ordered"] and out["p"] < 0.05
    back = compare(r, {("t", "b"): 1}, {("t", "a"): 1}, draws=200)
    assert back["difference"] == pytest.approx(-2.0) and not back["ordered"]
    same = compare(r, {("t", "a"): 1}, {("t", "a"): 1}, draws=200)
    assert same["difference"] == 0 and same["p"] == 1.0 and not same["ordered"]


def test_welch_agrees_with_scipy_and_refuses_single_values():
    from scipy.stats import ttest_ind

    a, b = [6.58, 6.61, 6.58], [6.45, 6.44, 6.45]
    p, (low, high) = welch(a, b)
    assert p == pytest.approx(ttest_ind(a, b, equal_var=False).pvalue, rel=1e-9)
    assert low < np.mean(a) - np.mean(b) < high
    assert welch([1.0, 1.0], [1.0, 1.0]) == (1.0, (0.0, 0.0)) and welch([2.0, 2.0], [1.0, 1.0])[0] == 0.0
    with pytest.raises(ValueError, match="expected at least 2 a side"):
        welch([1.0], [1.0, 2.0])


def test_the_seeds_decide_when_documents_cannot_tell_noise_from_a_difference():
    # the same small gap on every document, but seeds that disagree: the documents' p is tiny, the seeds' is not
    base = [[10.0, 20, 30, 40] * 2] * 3
    noisy = [[x * f for x in base[0]] for f in (1.05, 0.97, 1.01)]
    r = fake_results({("t", "a"): noisy, ("t", "b"): base})
    out = compare(r, {("t", "a"): 1}, {("t", "b"): 1}, draws=100)
    assert out["p_documents"] < 0.05 and out["p_seeds"] > 0.05 and out["p"] == out["p_seeds"] and not out["ordered"]


def test_a_side_may_average_cells():
    r = fake_results({("t", "a"): [[10.0, 20, 30, 40] * 2] * 3, ("t", "b"): [[30.0, 60, 90, 120] * 2] * 3,
                      ("t", "c"): [[20.0, 40, 60, 80] * 2] * 3})
    out = compare(r, {("t", "c"): 1}, {("t", "a"): 0.5, ("t", "b"): 0.5}, draws=50)
    assert out["difference"] == pytest.approx(0.0)


def test_cells_scored_on_different_pieces_are_refused():
    r = fake_results({("t", "a"): [[1.0, 2, 3, 4] * 2] * 2})
    r["runs"]["t-a-s1"]["predictions"]["mlm_by_document"]["count"] = [1, 2, 3, 5] * 2
    with pytest.raises(ValueError, match="different held-out pieces"):
        cell_documents(r, r["cells"]["t"]["a"])
    two = fake_results({("t", "a"): [[1.0, 2, 3, 4] * 2] * 2, ("t", "b"): [[1.0, 2, 3, 4] * 2] * 2})
    for name in two["cells"]["t"]["b"]:
        two["runs"][name]["predictions"]["mlm_by_document"]["count"] = [1, 2, 3, 5] * 2
    with pytest.raises(ValueError, match="different held-out pieces"):
        compare(two, {("t", "a"): 1}, {("t", "b"): 1}, draws=10)


def test_the_plan_tests_seven_findings_and_judges_none_with_one_seed():
    full = plan("full")
    assert len(full) == 7
    middle = full["all shared: middle E beats E = 16"][1]
    assert middle == {("table3", "all E=32"): 0.5, ("table3", "all E=64"): 0.5}
    assert plan("book")["all shared: middle E beats E = 128"][1] == {("table3", "all E=64"): 1.0}


def test_depth_scores_refuse_a_model_that_does_not_share_all_its_layers(tmp_path):
    config = ablation_model(16, "ffn")
    with pytest.warns(UserWarning, match="cannot be expressed in transformers' layout"):
        AlbertForPreTraining(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="sharing='ffn'"):
        depth_scores(tmp_path, (2,))


def test_depth_scores_at_the_trained_depth_are_the_models_own_scores(tmp_path):
    torch.manual_seed(0)
    config = ablation_model(16, "all")
    AlbertForPreTraining(config).save_pretrained(tmp_path)
    out = depth_scores(tmp_path, (1, 6))
    from albert_edu.ablations import ABLATION_LENGTH
    from albert_edu.experiments import held_out_examples
    from albert_edu.training import predict

    seen = predict(AlbertForPreTraining.from_pretrained(tmp_path), held_out_examples(max_seq_len=ABLATION_LENGTH, passes=1,
                                                                                     pairs="neutral")["sop"])
    assert out["6"]["mlm_loss"] == pytest.approx(seen["mlm_loss_sum"] / seen["mlm_total"], rel=1e-9)
    assert sum(out["6"]["right"]) == seen["mlm_right"] and sum(out["count"]) == seen["mlm_total"]
    assert out["1"]["mlm_loss"] != out["6"]["mlm_loss"]


def test_the_command_refuses_bad_workers_and_missing_data(tmp_path):
    for args, message in ((["--workers", "0"], "--workers 0: expected at least 1"),
                          (["--data-dir", str(tmp_path)], "no tokenizer in")):
        result = subprocess.run([sys.executable, "-m", "albert_edu", "ablations", *args], capture_output=True, text=True)
        assert result.returncode == 1 and message in result.stderr


@pytest.mark.parametrize("recipe", ["book", "full"])
def test_a_committed_grid_is_the_current_recipe_with_every_seed_and_document(recipe):
    """Chapter 11 reads both grids from data/results/ (the book's so that it trains nothing): each must be today's
    recipe, trained by today's code on today's data (the run keys), with every seed of every cell."""
    results = json.loads((RESULTS_DIR / f"ablations-{recipe}.json").read_text())
    assert results["command"] == f"albert-edu ablations --recipe {recipe}"
    grid = ablation_runs(recipe)
    assert results["cells"] == {t: {c: [r.name for r in rs] for c, rs in cs.items()} for t, cs in grid.items()}
    for run in unique_runs(grid):
        summary = results["runs"][run.name]
        assert summary["key"] == run_key(run) and summary["training"]["steps"] == run.training.steps
    seeds = len(check_ablation_recipe(recipe)["seeds"])
    for table, cells in results["cells"].items():
        for cell in cells:
            s = cell_scores(results, table, cell, draws=100)
            assert len(s["seed_losses"]) == seeds and s["loss_interval"][0] <= s["loss"] <= s["loss_interval"][1]
    assert set(read_plan(results, draws=100)) == set(plan(recipe))


def test_committed_grids_are_carried_over_to_new_fingerprints_only_when_runs_trained_again_are_the_same(
        tmp_path, monkeypatch):
    """albert-edu rekey, with stand-ins for the code at the base commit (it gives today's committed keys) and for
    today's (another key per run), and for training (the committed summaries with another time): every fingerprint
    moves, the fine-tuning starts are renamed, a record is appended, and nothing else changes; a run trained again
    that differs, a fingerprint that was stale before the change, or an unknown run is refused."""
    import hashlib
    import shutil

    import albert_edu.ablations as ablations
    import albert_edu.experiments as experiments
    import albert_edu.run_cache as run_cache
    import albert_edu.tools.rekey as rekey

    for name in rekey.GRIDS:
        shutil.copyfile(RESULTS_DIR / f"{name}.json", tmp_path / f"{name}.json")
    book = json.loads((RESULTS_DIR / "ablations-book.json").read_text())
    real_key = experiments.run_key
    package = Path(experiments.__file__).parent
    at_base = {name: (package / name).read_bytes() for name in experiments.CODE_FILES}  # the committed keys' code
    today = {name: code + b"\n# an input check\n" for name, code in at_base.items()}  # a change that moves them
    new_key = lambda run: real_key(run, code=today)  # noqa: E731
    assert len(rekey._commit_of("HEAD")) == 40  # --base is recorded as the commit's full hash
    with pytest.raises(rekey.RekeyError, match="--base no-such-commit: not a commit of this repository"):
        rekey._commit_of("no-such-commit")
    monkeypatch.setattr(rekey, "_commit_of", lambda rev: rev)
    monkeypatch.setattr(rekey, "sources_at", lambda base: at_base)
    for module in (experiments, run_cache):  # run_key's home, and the chapter's re-export of it that rekey imports
        monkeypatch.setattr(module, "run_key", lambda run, data_dir=DATA_DIR, device="cpu", code=None:
                            real_key(run, data_dir, device, today if code is None else code))
    again = {name: {**summary, "seconds": 1.0, "tokens_per_s": 9} for name, summary in book["runs"].items()}
    monkeypatch.setattr(experiments, "train_all", lambda chosen, *args: [tmp_path / r.name for r in chosen])
    monkeypatch.setattr(experiments, "run_summary", lambda path: again[path.name])
    monkeypatch.setattr(ablations, "depth_scores", lambda path, *args: book["depths"][path.name])
    monkeypatch.setattr(rekey, "train_at", lambda base, names, *args: [tmp_path / "base" / n for n in names])
    trained = {}  # the weights each run's directory holds
    monkeypatch.setattr(rekey, "weights", lambda path: trained.get(path, b"the same weights"))
    checked = ["ablation-all-E64-s0-book", "ablation-none-E128-s0-book"]
    loss = again[checked[1]]["loss"]
    again[checked[1]]["loss"] = loss[:-1] + [[loss[-1][0], loss[-1][1] + 5e-6]]  # rounded on another machine

    carried = rekey.rekeyed("BASE", checked, tmp_path, tmp_path, DATA_DIR)
    assert sorted(p.name for p in carried) == sorted(p.name for p in tmp_path.glob("*.json"))
    for path, results in carried.items():
        before = json.loads(path.read_text())
        assert results["rekeyed"][-1]["from"] == "BASE" and results["rekeyed"][-1]["trained_again"] == checked
        assert results["rekeyed"][-1]["tolerance"] == {"rel": 1e-6, "abs": 2e-5}
        if "runs" in before:
            grid = grid_runs(before["recipe"])
            assert all(results["runs"][n]["key"] == new_key(grid[n]) != s["key"] for n, s in before["runs"].items())
            assert {n: {**s, "key": 0} for n, s in results["runs"].items()} == \
                {n: {**s, "key": 0} for n, s in before["runs"].items()}
        else:
            assert all(new != old and new.rsplit("-", 1)[0] == old.rsplit("-", 1)[0]
                       for c in before["starts"] for new, old in zip(results["starts"][c], before["starts"][c]) if old)
        assert {k: v for k, v in results.items() if k not in ("runs", "starts", "rekeyed")} == \
            {k: v for k, v in before.items() if k not in ("runs", "starts", "rekeyed")}

    again[checked[1]]["loss"] = loss[:-1] + [[loss[-1][0], loss[-1][1] + 1e-4]]
    with pytest.raises(rekey.RekeyError, match=f"{checked[1]}, trained again, differs from the committed run in "
                                               f"\\['loss'\\] beyond rounding"):
        rekey.rekeyed("BASE", checked, tmp_path, tmp_path, DATA_DIR)
    again[checked[1]]["loss"] = loss
    trained[tmp_path / checked[0]] = b"other weights"
    with pytest.raises(rekey.RekeyError, match=f"{checked[0]}: the code of BASE and today's train different weights"):
        rekey.rekeyed("BASE", checked, tmp_path, tmp_path, DATA_DIR)
    del trained[tmp_path / checked[0]]
    with pytest.raises(rekey.RekeyError, match="expected one or more runs of the ablation grids carried over, to train again "
                                               "\\(unknown: \\['nosuch'\\]\\)"):
        rekey.rekeyed("BASE", ["nosuch"], tmp_path, tmp_path, DATA_DIR)
    stale = json.loads((tmp_path / "ablations-full.json").read_text())
    stale["runs"]["ablation-wide-s1-full"]["key"] = "0" * 16
    (tmp_path / "ablations-full.json").write_text(json.dumps(stale))
    with pytest.raises(rekey.RekeyError, match="ablation-wide-s1-full was not current at BASE"):
        rekey.rekeyed("BASE", checked[:1], tmp_path, tmp_path, DATA_DIR)


def test_a_carried_over_grid_records_the_commits_and_the_runs_trained_again():
    grids = {r.name for recipe in ("book", "full") for r in unique_runs(ablation_runs(recipe))}
    from albert_edu.tools.rekey import GRIDS

    for name in GRIDS:
        for record in json.loads((RESULTS_DIR / f"{name}.json").read_text()).get("rekeyed", []):
            assert record["from"] and record["to"] and record["trained_again"]
            assert set(record["trained_again"]) <= grids


def test_the_committed_timings_are_of_todays_geometries_with_every_round():
    """Chapter 11 reads its timings from data/results/throughput.json (albert-edu throughput) instead of the clock."""
    timings = load_throughput()
    rounds = timings["rounds"]
    assert timings["command"].startswith("albert-edu throughput") and rounds >= 3 and timings["commit"]
    assert set(timings["machine"]) >= {"cpu", "cores", "torch", "threads", "l3_cache"}
    assert list(timings["step_seconds"]) == list(THROUGHPUT_MODELS)
    sections = [timings[k] for k in ("step_seconds", "forward_seconds", "lamb_seconds", "wide_step_seconds")]
    sections += [{k: r[k] for k in ("shared", "unshared")} for r in timings["reuse"]]
    assert all(len(times) == rounds and min(times) > 0 for section in sections for times in section.values())
    assert [r["hidden_size"] for r in timings["reuse"]] == [768, 1024, 2048]


def test_timings_of_other_geometries_are_refused_with_the_command_to_run(tmp_path):
    timings = json.loads((RESULTS_DIR / THROUGHPUT_FILE).read_text())
    timings["models"]["albert-base"]["hidden_size"] = 512
    (tmp_path / "old.json").write_text(json.dumps(timings))
    with pytest.raises(ValueError, match=r"albert-base\).*albert-edu throughput"):
        load_throughput(tmp_path / "old.json")


def test_measure_throughput_times_every_part_round_by_round():
    small = {name: AlbertConfig.from_preset("tiny", hidden_size=32, num_attention_heads=2, intermediate_size=64,
                                            num_hidden_layers=2, sharing=sharing)
             for name, sharing in (("bert-base", "none"), ("albert-base", "all"), ("bert-large", "none"),
                                   ("albert-large", "all"))}
    timings = measure_throughput(2, length=8, models=small, reuse_sizes=(16,), wide_batch=2)
    assert timings["command"] == "albert-edu throughput --rounds 2" and timings["models"]["bert-base"]["sharing"] == "none"
    assert set(timings["step_seconds"]) == set(small) and set(timings["lamb_seconds"]) == {"bert-large", "albert-large"}
    assert all(len(t) == 2 for t in [*timings["step_seconds"].values(), *timings["wide_step_seconds"].values()])
    assert timings["reuse"][0]["hidden_size"] == 16 and len(timings["reuse"][0]["shared"]) == 2


def test_the_throughput_command_refuses_no_rounds(tmp_path):
    result = subprocess.run([sys.executable, "-m", "albert_edu", "throughput", "--rounds", "0", "--out",
                             str(tmp_path / "t.json")], capture_output=True, text=True)
    assert result.returncode == 1 and "--rounds 0: expected at least 1" in result.stderr
    assert not (tmp_path / "t.json").exists()


def test_table6_s_rate_sweep_changes_only_the_rate_and_keeps_the_grid_s_own_runs():
    grid = ablation_runs("full")["table6"]
    for side, runs in grid.items():
        for seed, run in enumerate(runs):
            assert table6_run(side, run.training.lr, seed) == run  # the grid's rate: the grid's run, trained once
            for lr in TABLE6_RATES:
                other = table6_run(side, lr, seed)
                assert other.model == run.model and other.training == replace(run.training, lr=lr)
    names = grid_runs("table6-rates")
    assert len(names) == 2 * len(TABLE6_RATES) * 3 and len({run_key(r) for r in names.values()}) == len(names)


def test_the_committed_table6_rate_sweep_chose_each_side_s_lowest_loss_and_trained_every_seed_at_it():
    """data/results/ablations-table6-rates.json: each side's rate is the one whose seed-0 run has the lowest held-out
    MLM loss; the cells hold every seed at that rate; every run is today's (its key); and the runs it shares with
    the full grid (the grid's rate) scored what the grid's file records."""
    results = json.loads((RESULTS_DIR / TABLE6_FILE).read_text())
    full = json.loads((RESULTS_DIR / "ablations-full.json").read_text())
    assert results["command"] == "albert-edu ablations --recipe table6-rates" and results["rates"] == list(TABLE6_RATES)
    possible = grid_runs("table6-rates")
    for name, summary in results["runs"].items():
        assert summary["key"] == run_key(possible[name])
    for side, by_rate in results["sweep"].items():
        losses = {float(lr): results["runs"][name]["scores"]["mlm_loss"] for lr, name in by_rate.items()}
        assert results["chosen"][side] == min(losses, key=losses.get)
        assert results["cells"]["table6"][side] == [table6_run(side, results["chosen"][side], s).name for s in (0, 1, 2)]
    for name, summary in results["runs"].items():
        if name in full["runs"]:  # trained again: the same run gives the same scores
            assert summary["scores"] == pytest.approx(full["runs"][name]["scores"], rel=1e-6, abs=2e-5)
