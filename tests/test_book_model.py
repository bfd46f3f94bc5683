"""The book's pre-trained ALBERT (albert_edu.tools.book_model, chapter 7, section 7.8): the committed checkpoint is
the recipe's run, loads here and in transformers, refuses a changed file by name, re-trains its first 20 steps on
the CPU to its logged losses, and its scores in data/results/albert-book.json are what the checkpoint computes."""

import json
import shutil
from dataclasses import replace

import pytest
import torch

from albert_edu.tools import book_model
from albert_edu.tools.book_model import BOOK_DIR, FIRST_DIR, FIRST_RECIPE, FIRST_RESULTS, RECIPE, RESULTS


def test_the_committed_checkpoint_is_the_recipe_run_and_fits_the_budget():
    from albert_edu.tools.large_sweep import training_config

    record = book_model.verify()
    assert record["recipe"] == RECIPE and record["precision"] == "fp32"
    assert replace(book_model.training_config(), save_every=0) == training_config(
        RECIPE["lr"], RECIPE["steps"], RECIPE["evaluations"], RECIPE["batch_size"], RECIPE["optimizer"])
    log = [json.loads(line) for line in (BOOK_DIR / "log.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in log) == RECIPE["steps"]
    assert record["held_out_at_end"] == {"step": RECIPE["steps"], **[r for r in log if "eval" in r][-1]["eval"]}
    committed = sum(f.stat().st_size for f in (BOOK_DIR.parent).rglob("*") if f.is_file())
    assert committed <= 50 * 2**20  # all the committed checkpoints together: at most 50 MB


def test_the_first_recipe_run_is_kept_for_the_chapters_that_read_it():
    """The 1,800-step run (chapter 7, section 7.8's plateau; chapters 8-10 and 12 still read it) keeps its files,
    its recipe and its scores."""
    record = book_model.verify(FIRST_DIR)
    assert record["recipe"] == FIRST_RECIPE and FIRST_RECIPE["steps"] < RECIPE["steps"]
    assert json.loads(FIRST_RESULTS.read_text())["model_sha256"] == record["sha256"]["model.safetensors"]


def test_the_checkpoint_meets_the_issue_targets():
    """Held-out MLM accuracy at least 30% and a loss at least 1.5 nats under the unigram yardstick, per document,
    recomputed from the checkpoint (data/results/albert-book.json, which the last test checks against it), with the
    95% intervals' lower ends above the targets too; the first recipe's run met neither."""
    result, first = json.loads(RESULTS.read_text()), json.loads(FIRST_RESULTS.read_text())
    assert result["mlm_accuracy_interval"][0] >= 0.30 and result["margin_interval"][0] >= 1.5
    assert first["mlm_accuracy"] < 0.30 and first["margin_under_unigram"] < 1.5


def test_prefetched_passes_are_the_passes_the_loop_would_make():
    """prefetched_passes hands the stream the examples a worker made with the same function and arguments: equal,
    example by example, to the ones made here."""
    import albert_edu.resume as resume
    from albert_edu.corpus import load_documents
    from albert_edu.sources import LARGE_DIR
    from albert_edu.tokenizer import Tokenizer

    config = replace(book_model.training_config(), steps=1, batch_size=1)
    documents, tokenizer = load_documents("train", LARGE_DIR), Tokenizer.load(LARGE_DIR / "tokenizer")
    args = (documents, tokenizer, config.objective, config.max_seq_len, 0, config.pairs)
    original = resume.create_examples
    with book_model.prefetched_passes(config, 1):
        assert resume.create_examples is not original  # patched while inside
        ahead = resume.create_examples(*args)
    assert resume.create_examples is original  # and restored after
    assert len(ahead) > 90_000 and ahead == original(*args)


def test_the_checkpoint_loads_here_and_in_transformers_alike(tokenizer):
    transformers = pytest.importorskip("transformers")
    from albert_edu.sources import LARGE_DIR
    from albert_edu.tokenizer import Tokenizer

    ours = book_model.load()
    theirs = transformers.AlbertForMaskedLM.from_pretrained(BOOK_DIR).eval()
    ids = Tokenizer.load(LARGE_DIR / "tokenizer").encode("She opened the [MASK] and stepped out into the rain.")
    inputs = torch.tensor([[2, *ids, 3]])
    with torch.no_grad():
        torch.testing.assert_close(theirs(input_ids=inputs).logits, ours(input_ids=inputs).prediction_logits,
                                   atol=1e-4, rtol=1e-4)


def test_a_changed_or_missing_file_is_refused_by_name(tmp_path):
    folder = tmp_path / "albert-book"
    shutil.copytree(BOOK_DIR, folder)
    weights = bytearray((folder / "model.safetensors").read_bytes())
    weights[-1] ^= 1
    (folder / "model.safetensors").write_bytes(bytes(weights))
    with pytest.raises(ValueError, match=r"model\.safetensors has sha256 [0-9a-f]{64}, but provenance.json records"):
        book_model.load(folder)
    (folder / "log.jsonl").unlink()
    with pytest.raises(ValueError, match=r"log\.jsonl is missing"):
        book_model.verify(folder)
    (folder / "provenance.json").unlink()
    with pytest.raises(ValueError, match="holds no provenance.json"):
        book_model.verify(folder)


def test_an_unfinished_run_is_not_committed(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    lines = (BOOK_DIR / "log.jsonl").read_text().splitlines()
    (run / "log.jsonl").write_text("\n".join(lines[:5]) + "\n")
    shutil.copyfile(BOOK_DIR / "config.json", run / "config.json")
    with pytest.raises(ValueError, match="holds no finished run of the recipe"):
        book_model.commit_checkpoint(run, "cpu", 1.0, "0000000", folder=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_first_20_steps_retrain_on_the_cpu_to_the_logged_losses(tmp_path):
    """The recipe's first 20 steps, trained here, against the committed log (made on a GPU, in fp32): a loss within
    1e-4 of the logged one at each logged step (processors differ in the last bits)."""
    book_model.train(tmp_path / "run", "cpu", stop_after=20, progress=False)
    ours = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    logged = {r["step"]: r for r in map(json.loads, (BOOK_DIR / "log.jsonl").read_text().splitlines()) if "loss" in r}
    assert [r["step"] for r in ours] == [10, 20]
    for record in ours:
        assert abs(record["loss"] - logged[record["step"]]["loss"]) <= 1e-4, (record, logged[record["step"]])
        assert record["lr"] == pytest.approx(logged[record["step"]]["lr"], rel=1e-12)


def test_the_scores_are_what_the_checkpoint_computes():
    """data/results/albert-book.json: its totals are the sums of its per-document counts, and the counts of the
    first 40 documents are computed again from the checkpoint."""
    import numpy as np

    result = json.loads(RESULTS.read_text())
    assert result["model_sha256"] == book_model.verify()["sha256"]["model.safetensors"]
    assert result["per_document"]["columns"] == list(book_model.COLUMNS)
    values = np.asarray(result["per_document"]["values"])
    masked, right, loss, base, at_mask, right_at_mask = values.sum(0)[:6]
    assert masked == result["masked_pieces"] and at_mask == result["at_mask_pieces"] and 0.7 < at_mask / masked < 0.9
    assert right / masked == pytest.approx(result["mlm_accuracy"]) and loss / masked == pytest.approx(result["mlm_loss"], abs=1e-4)
    assert right_at_mask / at_mask == pytest.approx(result["mlm_accuracy_at_mask"])
    assert (base - loss) / masked == pytest.approx(result["margin_under_unigram"], abs=1e-4)
    for name in ("mlm_accuracy", "mlm_accuracy_at_mask", "margin_under_unigram"):
        low, high = result[name.replace("_under_unigram", "") + "_interval"]
        assert low <= result[name] <= high
    documents = result["per_document"]["document"][:40]
    examples = [e for e in book_model.held_out_examples() if e.document in set(documents)]
    counts = book_model.example_counts(book_model.load(), examples, book_model.unigram_log_p())
    for document, stored in zip(documents, values):
        mine = sum(row for e, row in zip(examples, counts) if e.document == document)
        np.testing.assert_allclose(mine, stored, atol=2e-3)
    assert result["probe_distinct_top1"] == len({p["rank_1"] for p in result["probes"]})
    assert result["probe_top5_rate"] == sum(p["hit"] for p in result["probes"]) / len(result["probes"])
