"""Table 5 on the book's pre-trained ALBERT (albert_edu.tools.table5_book, chapter 8, section 8.7): the committed
results are the module's nine runs from the committed checkpoint, asked the held-out pairs the module makes now;
unfinished runs are refused by name; and (slow) a run's first 10 steps re-train to its logged loss."""

import json
from dataclasses import asdict

import pytest

from albert_edu.tools import table5_book
from albert_edu.tools.book_model import verify


@pytest.fixture(scope="module")
def record():
    return json.loads(table5_book.RESULTS.read_text())


@pytest.mark.parametrize("start", sorted(table5_book.STARTS))
def test_the_results_are_the_nine_runs_from_the_committed_checkpoint(start):
    """Each committed file (chapter 8 reads the 6,000-step one and prints the 1,800-step one beside it)."""
    record = json.loads(table5_book.results_path(start).read_text())
    assert record["start"]["sha256"] == verify(table5_book.CHECKPOINTS / start)["sha256"]["model.safetensors"]
    assert record["start"]["checkpoint"] == f"data/checkpoints/{start}"
    settings = {"steps": table5_book.STEPS, "batch_size": table5_book.BATCH, "lr": table5_book.LR,
                "optimizer": table5_book.OPTIMIZER, "warmup_steps": table5_book.WARMUP,
                "max_seq_len": table5_book.MAX_SEQ_LEN, "train_pairs": table5_book.TRAIN_PAIRS,
                "held_out_per_task": table5_book.HELD_OUT}
    assert record["settings"] == settings
    assert [r["training"] for r in record["runs"]] == [json.loads(json.dumps(asdict(run.training)))
                                                       for run in table5_book.runs()]
    assert record["training_minutes"] == pytest.approx(sum(r["seconds"] for r in record["runs"]) / 60, abs=0.051)
    for name, held in record["held_out"].items():
        assert len(held["labels"]) == len(held["documents"]) == table5_book.HELD_OUT, name
        assert all(len(r[name]) == table5_book.HELD_OUT and set(r[name]) <= {"0", "1"} for r in record["runs"])
    start = record["start"]["mlm_by_document"]  # the checkpoint itself, on the same masked pieces as every run
    for r in record["runs"]:
        assert r["mlm_by_document"]["documents"] == start["documents"] and r["mlm_by_document"]["count"] == start["count"]
        assert max(step for step, *_ in r["loss"]) == table5_book.STEPS
        mlm = r["mlm_by_document"]
        assert len(mlm["documents"]) == len(mlm["count"]) == len(mlm["right"]) == len(mlm["loss"])
        assert all(0 <= right <= count for right, count in zip(mlm["right"], mlm["count"]))


def test_the_held_out_pairs_are_what_the_module_makes(record):
    made = table5_book.held_out()
    later = json.loads(table5_book.results_path("albert-book").read_text())
    assert later["held_out"] == record["held_out"]  # both checkpoints' runs were asked the same pairs
    for pairs, tasks in made.items():
        for task, subset in tasks.items():
            stored = record["held_out"][f"{pairs}/{task}"]
            assert "".join(str(e.pair_label) for e in subset) == stored["labels"]
            assert [e.document for e in subset] == stored["documents"]


def test_unfinished_runs_and_bad_shards_are_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"runs not finished: \['none-s0-[0-9a-f]{16}'"):
        table5_book.collect(runs_dir=tmp_path, out=tmp_path / "out.json", examples={})
    assert not (tmp_path / "out.json").exists()
    with pytest.raises(SystemExit):
        table5_book.main(["--shard", "2/2"])
    assert "--shard '2/2': expected I/N with 0 <= I < N" in capsys.readouterr().err


@pytest.mark.slow
def test_the_first_10_steps_retrain_to_the_logged_loss(tmp_path, record):
    """The SOP run of seed 0, its first 10 steps trained here from the committed checkpoint: the loss logged at
    step 10 within 1e-4 of the committed one."""
    from dataclasses import replace

    from albert_edu.sources import LARGE_DIR
    from albert_edu.tools.book_model import FIRST_DIR
    from albert_edu.training import pretrain

    run = next(r for r in table5_book.runs() if r.name == "sop-s0")
    pretrain(run.model, replace(run.training, save_every=0), tmp_path / "run", data_dir=LARGE_DIR, progress=False,
             init_from=FIRST_DIR, stop_after=10, precision="fp32")
    ours = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    logged = {step: (mlm, pair) for step, mlm, pair in next(r for r in record["runs"] if r["name"] == "sop-s0")["loss"]}
    assert abs(ours[0]["mlm_loss"] - logged[10][0]) <= 1e-4 and abs(ours[0]["pair_loss"] - logged[10][1]) <= 1e-4


def test_each_start_is_a_committed_checkpoint_with_its_own_results_file():
    """--start chooses the checkpoint the runs continue: the first recipe's (chapter 8 reads its file) or the model
    that left the plateau; each verifies against its provenance, and the two write different files."""
    for name in table5_book.STARTS:
        assert table5_book.start_sha256(table5_book.CHECKPOINTS / name) == verify(table5_book.CHECKPOINTS / name)["sha256"]["model.safetensors"]
    assert table5_book.STARTS["albert-book-1800"] == table5_book.RESULTS
    assert len(set(table5_book.STARTS.values())) == len(table5_book.STARTS)


def test_longer_continuations_get_their_own_schedule_runs_and_file(tmp_path, capsys):
    """--steps N: warm-up and checkpoints a tenth of N, other run folders, another results file; the committed
    recipe's 80 steps keep their schedule, keys and file."""
    assert table5_book.schedule() == (table5_book.WARMUP, table5_book.SAVE_EVERY)
    assert table5_book.schedule(2000) == (200, 200) and table5_book.schedule(100) == (10, table5_book.SAVE_EVERY)
    assert table5_book.results_path("albert-book") == table5_book.STARTS["albert-book"]
    assert table5_book.results_path("albert-book", 2000).name == "table5-book-6000-2000steps.json"
    longer = table5_book.runs(2000)
    assert [r.name for r in longer] == [r.name for r in table5_book.runs()]
    assert all(r.training.steps == 2000 and r.training.warmup_steps == 200 for r in longer)
    start = "0" * 64
    assert {table5_book.folder(r, tmp_path, start) for r in longer}.isdisjoint(
        {table5_book.folder(r, tmp_path, start) for r in table5_book.runs()})
    with pytest.raises(ValueError, match=r"runs not finished: \['none-s0-"):
        table5_book.collect(runs_dir=tmp_path, out=tmp_path / "out.json", examples={}, steps=2000)
    with pytest.raises(ValueError, match="steps=5: expected an integer of at least 10"):
        table5_book.runs(5)
    with pytest.raises(SystemExit):
        table5_book.main(["--steps", "0"])
    assert "--steps 0: steps=0: expected an integer of at least 10" in capsys.readouterr().err


def test_probes_of_the_frozen_checkpoint_have_their_own_file_and_refuse_too_few_pairs(monkeypatch):
    """--probe fits linear probes of the committed checkpoint itself; its file sits beside the runs' file, and a
    share of documents too small for PROBE_PAIRS pairs is refused with the counts."""
    assert table5_book.probe_path("albert-book").name == "table5-book-6000-probe.json"
    assert table5_book.probe_path("albert-book-1800").name == "table5-book-probe.json"
    from albert_edu.corpus import load_documents
    from albert_edu.sources import LARGE_DIR

    documents = load_documents("validation", LARGE_DIR)[:40]
    monkeypatch.setattr(table5_book, "PROBE_SHARE", 0.05)
    with pytest.raises(ValueError, match=r"sop pairs from 2 documents: expected at least 4096"):
        table5_book.probe_pairs(0, "sop", documents)
    monkeypatch.setattr(table5_book, "PROBE_PAIRS", 3)
    first, again = table5_book.probe_pairs(0, "nsp", documents), table5_book.probe_pairs(0, "nsp", documents)
    assert len(first) == 3 and [e.input_ids for e in first] == [e.input_ids for e in again]
    assert [e.input_ids for e in table5_book.probe_pairs(1, "nsp", documents)] != [e.input_ids for e in first]


def test_the_committed_probe_file_is_the_checkpoints_probes():
    from albert_edu.experiments import PROBE_READS

    record = json.loads(table5_book.probe_path("albert-book").read_text())  # committed: chapter 8 reads it
    assert record["start"]["sha256"] == verify(table5_book.CHECKPOINTS / "albert-book")["sha256"]["model.safetensors"]
    runs_file = json.loads(table5_book.results_path("albert-book").read_text())
    assert record["held_out"] == runs_file["held_out"]  # the runs' own held-out pairs
    for task in ("sop", "nsp"):
        assert list(record["probes"][task]) == list(PROBE_READS)
        for read in record["probes"][task].values():
            assert len(read["train_balanced"]) == len(table5_book.SEEDS)
            for pairs in ("neutral", "reference"):
                assert [len(a) for a in read[pairs]] == [table5_book.HELD_OUT] * len(table5_book.SEEDS)
