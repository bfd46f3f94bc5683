"""Chapter 10's downstream test of the book's pre-trained ALBERT (albert_edu.tools.finetune_book_model, section
10.5): the committed results are the module's grid from the committed checkpoint, on the held-out items the
module makes now; a bad corpus or worker count is refused by name."""

import json

import pytest

from albert_edu.finetune_grid import continuation_data
from albert_edu.tools import finetune_book_model as grid
from albert_edu.tools.book_model import FIRST_DIR, verify


@pytest.fixture(scope="module")
def record():
    return json.loads(grid.RESULTS.read_text())


def test_the_results_are_the_modules_grid_from_the_committed_checkpoint(record):
    assert record["start_sha256"] == verify(FIRST_DIR)["sha256"]["model.safetensors"]
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
    starts = [job[1]["start"] for job in grid.jobs()]
    assert starts == [None] * len(grid.SEEDS) + [str(FIRST_DIR)] * len(grid.SEEDS)


def test_the_held_out_items_are_what_the_module_makes(record):
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
