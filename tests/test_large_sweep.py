"""albert_edu.tools.large_sweep, the learning-rate sweep and step timing of section 2.5's corpus, on the small
corpus and two steps: it writes each run's evaluations and training loss with the command and the data it read,
and reads a finished run back instead of training it again."""

import json

from albert_edu.corpus import DATA_DIR
import pytest

from albert_edu.tools.large_sweep import main, parse_run


def test_the_sweep_records_its_runs_and_reads_finished_ones_back(tmp_path, small_validation):
    args = ["--data-dir", str(DATA_DIR), "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "sweep.json"),
            "--geometries", "E64-H128-L6", "--rates", "0.001", "--steps", "2"]
    main(args)
    first = json.loads((tmp_path / "sweep.json").read_text())
    (run,) = first["runs"]
    assert (run["geometry"], run["lr"], run["steps"], run["batch_size"]) == ("E64-H128-L6", 0.001, 2, 128)
    assert [e["step"] for e in run["evaluations"]] == [2] and 0 < run["evaluations"][0]["mlm_loss"] < 10
    assert first["command"].endswith(" ".join(args)) and first["data"] == json.loads(
        (DATA_DIR / "prepared" / "stats.json").read_text())["inputs"]
    weights = (tmp_path / "runs" / "E64-H128-L6-lamb0.001-b128-2" / "model.safetensors").stat().st_mtime_ns
    main(args)  # finished: read back, not trained again
    assert (tmp_path / "runs" / "E64-H128-L6-lamb0.001-b128-2" / "model.safetensors").stat().st_mtime_ns == weights
    assert json.loads((tmp_path / "sweep.json").read_text())["runs"][0]["evaluations"] == run["evaluations"]


def test_a_run_is_written_geometry_batch_optimizer_rate_steps():
    assert parse_run("E128-H256-L6/b32/adamw/1e-3/4500") == {
        "geometry": "E128-H256-L6", "batch_size": 32, "optimizer": "adamw", "lr": 1e-3, "steps": 4500}
    for spec in ("E64-H128-L6/b32/lamb/4e-3", "E64-H128-L6/bx/lamb/4e-3/10", "E9-H9-L9/b32/lamb/4e-3/10",
                 "E64-H128-L6/b32/sgd/4e-3/10"):
        with pytest.raises(ValueError, match="run 'E"):
            parse_run(spec)


def test_the_step_timing_can_replay_batches_made_in_advance(tmp_path):
    from albert_edu.tools.large_sweep import _Replay, step_speed

    result = step_speed("E64-H128-L6", DATA_DIR, "cpu", steps=2, rounds=1, batch_size=4, runs_dir=tmp_path,
                        premade=True)
    assert result["premade"] is True and set(result["rounds"]) == {"fp32", "bf16"}
    assert all(len(v) == 1 and v[0] > 0 for v in result["rounds"].values()) and result["fp32_tokens_per_s"] > 0
    replay = _Replay([["a", "b"], ["c", "d"]])
    assert [replay.take(2) for _ in range(3)] == [["a", "b"], ["c", "d"], ["a", "b"]]  # in turn, round and round
    with pytest.raises(ValueError, match="a batch of 3 asked for, but the batches made in advance hold 2"):
        replay.take(3)
    with pytest.raises(ValueError, match="no batches to replay"):
        _Replay([])
