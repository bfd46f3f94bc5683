"""The checkpoints committed with the book (albert_edu.tools.checkpoints): they are the runs chapters 8-10 load, made
by today's code and data, unaltered since, with their provenance; their first steps re-train to the committed logs;
and the command that makes them replaces out-of-date entries and reports what is wrong."""

import json

import pytest
import torch

from albert_edu.experiments import finished_run, load_result, run_dir, train_all, train_cached
from albert_edu.tools import checkpoints
from albert_edu.training import pretrain

RUNS = checkpoints.book_runs()


def test_the_committed_checkpoints_are_todays_book_runs_unaltered():
    assert checkpoints.problems(RUNS) == []


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.name)
def test_a_committed_run_is_found_before_the_run_cache_is_asked_to_train(run, tmp_path):
    committed = checkpoints.checkpoints_dir() / run_dir(run).name
    assert finished_run(run, runs_dir=tmp_path) == committed
    assert train_cached(run, runs_dir=tmp_path) == committed and train_all([run], runs_dir=tmp_path) == [committed]
    assert list(tmp_path.iterdir()) == []  # nothing trained


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.name)
def test_the_provenance_says_how_the_run_was_made(run):
    entry = finished_run(run, runs_dir=checkpoints.checkpoints_dir())
    record, result = json.loads((entry / "provenance.json").read_text()), load_result(entry)
    assert record["command"] == "albert-edu checkpoints" and record["commit"] != "unknown"
    assert record["device"] == "cpu" and "cores" in record["machine"] and record["minutes"] > 0
    t = run.training
    assert record["tokens_seen"] == t.steps * t.batch_size * t.max_seq_len
    assert record["held_out"] == result["scores"] and result["key"] == entry.name.rsplit("-", 1)[1]
    assert sorted(record["sha256"]) == sorted(checkpoints.FILES)


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.name)
def test_a_committed_run_retrains_its_first_20_steps_to_its_logged_losses(run, tmp_path):
    """The command reproduces the weights: 20 steps trained here, on one thread as train_all's workers train, log the
    losses the committed run logged, to within the last bits in which processors differ."""
    entry = finished_run(run, runs_dir=checkpoints.checkpoints_dir())
    logged = {r["step"]: r["loss"] for r in map(json.loads, (entry / "log.jsonl").read_text().splitlines()) if "loss" in r}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pretrain(run.model, run.training, tmp_path / "again", stop_after=20, progress=False)
    finally:
        torch.set_num_threads(threads)
    again = {r["step"]: r["loss"] for r in map(json.loads, (tmp_path / "again" / "log.jsonl").read_text().splitlines())
             if "loss" in r}
    assert sorted(again) == [10, 20]
    for step, loss in again.items():
        assert abs(loss - logged[step]) < 1e-4, (step, loss, logged[step])


def fake_finished(folder, run, content=b"weights"):
    """A finished entry of `run` in `folder` as train_cached leaves one, with made-up files."""
    path = run_dir(run, folder)
    path.mkdir(parents=True)
    for name in checkpoints.FILES:
        (path / name).write_bytes(content)
    t = run.training
    result = {"name": run.name, "key": path.name.rsplit("-", 1)[1], "seconds": 90.0, "scores": {"mlm_loss": 7.0},
              "training": {"steps": t.steps, "batch_size": t.batch_size, "max_seq_len": t.max_seq_len}}
    (path / "result.json").write_text(json.dumps(result))
    return path


def test_save_commits_a_finished_run_with_its_provenance_and_replaces_only_its_older_entry(tmp_path, monkeypatch):
    sop, unshared = RUNS[2], RUNS[3]
    assert unshared.name.startswith(sop.name + "-")  # "sop-s0-book-unshared" must survive sop's clean-up
    cache, store = tmp_path / "runs", tmp_path / "checkpoints"
    finished = fake_finished(cache, sop)
    (store / f"{sop.name}-0123456789abcdef").mkdir(parents=True)  # made by older code
    (store / f"{unshared.name}-0123456789abcdef").mkdir()
    monkeypatch.setattr("albert_edu.experiments.train_all", lambda runs, workers: [finished])
    assert checkpoints.save([sop], folder=store) == [store / finished.name]
    assert sorted(p.name for p in store.iterdir()) == sorted([finished.name, f"{unshared.name}-0123456789abcdef"])
    record = json.loads((store / finished.name / "provenance.json").read_text())
    assert record["minutes"] == 1.5 and record["held_out"] == {"mlm_loss": 7.0}
    assert record["sha256"]["model.safetensors"] == checkpoints.sha256(finished / "model.safetensors")
    assert checkpoints.problems([sop], store) == [
        f"{unshared.name}-0123456789abcdef: not a run the chapters load today; run `albert-edu checkpoints`, which "
        f"removes it"]


def test_problems_name_a_missing_run_and_an_altered_file(tmp_path, monkeypatch):
    sop, none = RUNS[2], RUNS[0]
    store = tmp_path / "checkpoints"
    entry = fake_finished(tmp_path / "runs", sop)
    monkeypatch.setattr("albert_edu.experiments.train_all", lambda runs, workers: [entry])
    checkpoints.save([sop], folder=store)
    (store / entry.name / "model.safetensors").write_bytes(b"changed")
    found = checkpoints.problems([sop, none], store)
    assert found[0].startswith(f"{none.name}: no entry under today's fingerprint {run_dir(none).name}")
    assert found[1] == f"{entry.name}: ['model.safetensors'] differ from the sha256 in its provenance.json"


@pytest.mark.slow
@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.name)
def test_a_book_run_retrained_in_full_equals_the_committed_one(run, tmp_path):
    """What `albert-edu checkpoints` does for each run from an empty cache (about 10 minutes for the four on 2 cores,
    two at a time): the same weights to within rounding, and the same held-out scores."""
    from safetensors.torch import load_file

    from albert_edu.experiments import score

    committed = finished_run(run, runs_dir=checkpoints.checkpoints_dir())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pretrain(run.model, run.training, tmp_path / "again", progress=False)
        scores = score(tmp_path / "again", max_seq_len=run.training.max_seq_len, pairs=run.training.pairs)
    finally:
        torch.set_num_threads(threads)
    ours, theirs = load_file(tmp_path / "again" / "model.safetensors"), load_file(committed / "model.safetensors")
    assert sorted(ours) == sorted(theirs) and all(torch.allclose(ours[k], theirs[k], atol=1e-4) for k in theirs)
    for key, value in load_result(committed)["scores"].items():
        assert scores[key] == pytest.approx(value, abs=2e-3), key
