"""Chapter 10's downstream test of the book's pre-trained ALBERT (albert_edu.tools.finetune_book_model, section
10.4): each committed results file is the module's grid from its committed checkpoint (the 1,800-step run's and
the 6,000-step run's), on the held-out items the module makes now; a bad corpus, worker count or start is refused
by name."""

import json

import pytest

from albert_edu.finetune_grid import continuation_data
from albert_edu.tools import finetune_book_model as grid
from albert_edu.tools.book_model import FIRST_DIR, verify


@pytest.fixture(scope="module", params=sorted(grid.STARTS))
def started(request):
    """(the checkpoint's folder, its committed results)"""
    return grid.CHECKPOINTS / request.param, json.loads(grid.STARTS[request.param].read_text())


def test_the_results_are_the_modules_grid_from_the_committed_checkpoint(started):
    start_dir, record = started
    assert record["start_sha256"] == verify(start_dir)["sha256"]["model.safetensors"]
    assert record["command"] == (grid.COMMAND if start_dir == FIRST_DIR else f"{grid.COMMAND} --start {start_dir.name}")
    assert (record["settings"], record["distractors"], record["seeds"]) == (grid.SETTINGS, grid.DISTRACTORS,
                                                                             list(grid.SEEDS))
    assert record["train_items"] == grid.SETTINGS["train_items"]
    items = record["items"]
    n = len(items["answers"])
    assert n == grid.SETTINGS["eval_items"] and len(items["documents"]) == len(items["sources"]) == n
    assert sorted(record["logits"]) == sorted(grid.CONTENDERS)
    for contender, seeds in record["logits"].items():
        assert len(seeds) == len(grid.SEEDS), contender
        assert all(len(s) == n and all(len(item) == grid.SETTINGS["candidates"] for item in s) for s in seeds)
    assert len(record["cell_minutes"]) == len(grid.CONTENDERS) * len(grid.SEEDS)
    # the jobs start where they say: random weights of the checkpoint's shape, or the checkpoint
    starts = [job[1]["start"] for job in grid.jobs(start_dir)]
    assert starts == [None] * len(grid.SEEDS) + [str(start_dir)] * len(grid.SEEDS)
    assert grid.jobs() == grid.jobs(FIRST_DIR)  # the first recipe's by default


def test_the_held_out_items_are_what_the_module_makes(started):
    _, record = started
    from albert_edu.downstream import overlap_scores

    train, test = continuation_data(grid.SETTINGS, grid.DISTRACTORS)
    assert len(train) == record["train_items"]
    made = {"documents": [t["document"] for t in test], "sources": [t["sources"] for t in test],
            "answers": [t["answer"] for t in test], "overlap": overlap_scores(test)}
    assert made == record["items"]


def test_a_bad_corpus_or_worker_count_is_refused(capsys):
    with pytest.raises(ValueError, match="corpus='huge': expected 'book'"):
        continuation_data(dict(grid.SETTINGS, corpus="huge"), grid.DISTRACTORS)
    with pytest.raises(SystemExit):
        grid.main(["--workers", "0"])
    assert "--workers 0: expected a positive integer" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        grid.main(["--start", "albert-large"])
    assert "invalid choice: 'albert-large'" in capsys.readouterr().err


def test_both_starts_share_their_items_and_their_runs_from_scratch():
    first, book = (json.loads(grid.STARTS[name].read_text()) for name in ("albert-book-1800", "albert-book"))
    assert first["items"] == book["items"]
    assert first["logits"]["from scratch"] == book["logits"]["from scratch"]  # the same fine-tunings, run twice
    assert first["logits"]["book ALBERT"] != book["logits"]["book ALBERT"]
