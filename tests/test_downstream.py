"""Chapter 10's library (albert_edu.downstream): fill-mask, word similarity, fine-tuning, the continuation task,
and loading a checkpoint of albert-base-v2's geometry written by transformers."""

import json
import random
import shutil
import subprocess
import sys
import warnings
from collections import Counter

import numpy as np
import pytest
import torch
import transformers
from scipy.stats import spearmanr

from albert_edu.config import AlbertConfig
from albert_edu.corpus import DATA_DIR, Document
from albert_edu.downstream import (CHECKPOINT_VARIABLE, FinetuneConfig, choice_logits,
                                   classifier_from, continuation_items, cooccurrence_vectors, encode_sentences,
                                   fill_mask, fit, fold_indices, load_checkpoint_and_tokenizer, nearest_words,
                                   overlap_scores, predict_classes, ranks, read_polarity, read_similarity,
                                   real_checkpoint, self_similarity, sentence_logits, spearman,
                                   stratified_folds, word_vectors)
from albert_edu.finetune_grid import run_units
from albert_edu.finetune_recipes import FINETUNE_RECIPES
from albert_edu.model import AlbertForPreTraining, AlbertForSequenceClassification
from albert_edu.pretraining_data import FUNCTION_PIECES


def tiny(vocab_size: int = 8000) -> AlbertConfig:
    return AlbertConfig.from_preset("tiny", vocab_size=vocab_size, hidden_size=32, num_attention_heads=2,
                                    intermediate_size=64, embedding_size=16, num_hidden_layers=2)


@pytest.fixture(scope="module")
def base_checkpoint(tmp_path_factory, tokenizer):
    """albert-base-v2's geometry (E 128, H 768, 12 layers, 12 heads), random weights, written by transformers'
    own save_pretrained, with this book's tokenizer (vocabulary 8,000 instead of 30,000)."""
    path = tmp_path_factory.mktemp("albert-base-geometry")
    torch.manual_seed(0)
    config = transformers.AlbertConfig(vocab_size=tokenizer.vocab_size, embedding_size=128, hidden_size=768,
                                       num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                                       hidden_act="gelu_new")
    transformers.AlbertForMaskedLM(config).save_pretrained(path)
    for name in ("spiece.model", "tokenizer_config.json"):
        shutil.copy(DATA_DIR / "tokenizer" / name, path / name)
    return path


def test_a_transformers_base_checkpoint_loads_and_fills_masks_as_transformers_does(base_checkpoint):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no sentence-pair head in a masked-LM checkpoint
        model, tokenizer = load_checkpoint_and_tokenizer(base_checkpoint)
    assert (model.config.hidden_size, model.config.num_hidden_layers, model.config.embedding_size) == (768, 12, 128)
    text = "paris is the [MASK] of [MASK]."
    ours = fill_mask(model, tokenizer, text, top_k=5)
    reference = transformers.pipeline("fill-mask", model=transformers.AlbertForMaskedLM.from_pretrained(base_checkpoint),
                                      tokenizer=transformers.AlbertTokenizer.from_pretrained(base_checkpoint))
    theirs = reference(text, top_k=5)
    assert len(ours) == len(theirs) == 2
    direct = fill_mask(transformers.AlbertForMaskedLM.from_pretrained(base_checkpoint), tokenizer, text, top_k=5)
    assert [[p for p, _ in row] for row in direct] == [[p for p, _ in row] for row in ours]  # transformers' model too
    for mine, their in zip(ours, theirs):
        assert [tokenizer.sp.piece_to_id(p) for p, _ in mine] == [t["token"] for t in their]
        assert np.allclose([q for _, q in mine], [t["score"] for t in their], atol=1e-5)


def test_a_transformers_base_checkpoint_takes_a_new_classification_head(base_checkpoint):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = AlbertForSequenceClassification.from_pretrained(base_checkpoint)
    assert any("classifier" in str(w.message) for w in caught)  # the new head is announced (and the pooler:
    theirs = transformers.AlbertModel.from_pretrained(base_checkpoint).eval()  # a masked-LM checkpoint has none)
    ids = torch.tensor([[2, 120, 55, 4, 9, 3]])
    with torch.no_grad():
        states = ours.eval().albert(ids).last_hidden_state
        assert torch.allclose(states, theirs(ids).last_hidden_state, atol=1e-4)  # the encoder is the checkpoint's
        assert ours(ids).logits.shape == (1, 2)
    three = classifier_from(str(base_checkpoint), 3, seed=0)
    assert three.classifier.out_features == 3 and three.num_labels == 3


def test_fill_mask_refuses_bad_input(tokenizer):
    model = AlbertForPreTraining(tiny())
    with pytest.raises(ValueError, match="has no \\[MASK\\]"):
        fill_mask(model, tokenizer, "no mask here")
    with pytest.raises(ValueError, match="top_k=0"):
        fill_mask(model, tokenizer, "a [MASK].", top_k=0)
    with pytest.raises(ValueError, match="expected at most 512"):
        fill_mask(model, tokenizer, "word " * 600 + "[MASK]")
    with pytest.raises(TypeError, match="no per-position vocabulary logits"):
        fill_mask(AlbertForSequenceClassification(tiny()), tokenizer, "a [MASK].")
    guesses = fill_mask(model, tokenizer, "a [MASK] and a [MASK].", top_k=3)
    assert len(guesses) == 2 and all(len(g) == 3 for g in guesses)
    assert all(a[1] >= b[1] for g in guesses for a, b in zip(g, g[1:]))  # best first


def test_a_tokenizer_of_another_vocabulary_is_refused(tmp_path, tokenizer):
    AlbertForPreTraining(tiny(vocab_size=500)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="has no spiece.model and is not one of the book's runs"):
        load_checkpoint_and_tokenizer(tmp_path)  # no tokenizer beside it: refused, never guessed
    shutil.copyfile(DATA_DIR / "tokenizer" / "spiece.model", tmp_path / "spiece.model")
    with pytest.raises(ValueError, match="vocabulary of 500 pieces but the tokenizer 8000"):
        load_checkpoint_and_tokenizer(tmp_path)
    with pytest.raises(FileNotFoundError, match="not a directory"):
        load_checkpoint_and_tokenizer(tmp_path / "missing")


def test_the_checkpoint_variable_names_a_complete_directory(monkeypatch, tmp_path, base_checkpoint):
    monkeypatch.delenv(CHECKPOINT_VARIABLE, raising=False)
    assert real_checkpoint() is None
    monkeypatch.setenv(CHECKPOINT_VARIABLE, str(base_checkpoint))
    assert real_checkpoint() == base_checkpoint
    monkeypatch.setenv(CHECKPOINT_VARIABLE, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="lacks \\['config.json', 'model.safetensors', 'spiece.model'\\]"):
        real_checkpoint()


def test_spearman_matches_scipy_with_and_without_ties():
    rng = np.random.default_rng(0)
    for x, y in ((rng.normal(size=50), rng.normal(size=50)), (rng.integers(0, 5, 40), rng.integers(0, 3, 40))):
        assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)
    assert list(ranks([10, 20, 20, 5])) == [2.0, 3.5, 3.5, 1.0]
    with pytest.raises(ValueError, match="at least 3"):
        spearman([1, 2], [1, 2])


def test_the_similarity_collections_read_as_scored_pairs():
    wordsim, simlex = read_similarity("wordsim353"), read_similarity("simlex999")
    assert len(wordsim) == 353 and len(simlex) == 999
    assert ("tiger", "cat", 7.35) in wordsim and ("smart", "intelligent", 9.2) in simlex
    with pytest.raises(ValueError, match="name='men'"):
        read_similarity("men")


def test_word_vectors_average_the_pieces_and_neighbours_leave_the_word_out(tokenizer):
    model = AlbertForPreTraining(tiny())
    table = model.albert.embeddings.word_embeddings.weight
    word = "unbelievably"
    ids = tokenizer.encode(word)
    assert len(ids) > 1
    assert torch.allclose(word_vectors(model, tokenizer, [word])[0], table[ids].double().mean(0))
    found = nearest_words(model, tokenizer, "war", k=4)
    assert len(found) == 4 and "war" not in [w for w, _ in found]
    assert all(a[1] >= b[1] for a, b in zip(found, found[1:]))


def test_cooccurrence_vectors_count_neighbours_within_the_window():
    documents = [Document("d", "d", "news", ["the cat sat on the mat.", "a dog sat on a log."])]
    vectors = cooccurrence_vectors(documents, ["cat", "dog", "sat", "bird"], window=1, min_count=1)
    assert set(vectors) == {"cat", "dog", "sat"}  # "bird" never occurs
    sat = cooccurrence_vectors(documents, ["sat"], window=1, min_count=1)["sat"]
    assert (sat > 0).sum() == 3  # cat, dog and on; "on" is common but still above chance next to "sat"
    assert self_similarity(torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)) == pytest.approx(1 / 3)


def test_polarity_sentences_and_folds():
    texts, labels = read_polarity()
    assert len(texts) == 200 and sum(labels) == 100
    assert any("—" in t for t in texts)  # Windows-1252's 0x97 read as an em dash
    folds = stratified_folds(labels, 5)
    for f in range(5):
        members = [y for y, g in zip(labels, folds) if g == f]
        assert len(members) == 40 and sum(members) == 20
    with pytest.raises(ValueError, match="folds=1"):
        stratified_folds(labels, 1)
    odd = [0] * 7 + [1] * 7  # each label 7 = 3 + 2 + 2: dealt from fold 0 both times, fold 0 would get 6 of 14
    sizes = Counter(stratified_folds(odd, 3))
    assert max(sizes.values()) - min(sizes.values()) <= 1
    train, test = fold_indices(folds, 2)
    assert sorted(train + test) == list(range(200)) and all(folds[i] == 2 for i in test) and len(test) == 40
    with pytest.raises(ValueError, match="fold=5"):
        fold_indices(folds, 5)
    with pytest.raises(ValueError, match="one class"):
        stratified_folds([1] * 10, 2)


def test_a_bad_polarity_line_is_named(tmp_path):
    (tmp_path / "pang_lee_polarity.cor").write_bytes(b"__label__pos fine\nlabel missing here\n")
    with pytest.raises(ValueError, match="pang_lee_polarity.cor:2"):
        read_polarity(tmp_path)


def test_finetune_config_refuses_bad_settings():
    for bad, named in (({"epochs": 0}, "epochs=0"), ({"batch_size": 2.5}, "batch_size=2.5"), ({"lr": 0}, "lr=0")):
        with pytest.raises(ValueError, match=named):
            FinetuneConfig(**bad)


def test_fine_tuning_learns_a_separable_toy_task(tokenizer):
    texts = ["good great fine", "great good", "fine good great", "bad awful poor", "awful bad", "poor bad awful"] * 4
    labels = [1, 1, 1, 0, 0, 0] * 4
    rows = encode_sentences(tokenizer, texts, 16)
    model = classifier_from(None, 2, seed=0, model_config=tiny())
    log = fit(model, rows, labels, FinetuneConfig(epochs=15, batch_size=8, lr=3e-3), sentence_logits)
    assert log[-1]["loss"] < 0.5 * log[0]["loss"]
    answers = [int(p[1] > 0.5) for p in predict_classes(model, rows)]
    assert answers == labels
    with pytest.raises(ValueError, match="start=None"):
        classifier_from(None, 2, seed=0)


def test_continuation_items_hold_the_true_next_sentence(tokenizer):
    documents = [Document(f"d{k}", f"d{k}", "news", [f"sentence {k} number {i} here." for i in range(9)])
                 for k in range(4)]
    for kind in ("other", "same"):
        items = continuation_items(documents, tokenizer, distractors=kind, seed=0, window=4)
        assert len(items) == 4 * 8
        for item in items:
            text = tokenizer.decode(item["passage"])
            k, i = int(text.split()[1]), int(text.split()[3])
            true = tokenizer.decode(item["options"][item["answer"]])
            assert true == f"sentence {k} number {i + 1} here."
            others = [tokenizer.decode(o) for j, o in enumerate(item["options"]) if j != item["answer"]]
            assert all((o.split()[1] == str(k)) == (kind == "same") for o in others)
            assert [int(tokenizer.decode(o).split()[1]) for o in item["options"]] == item["sources"]
            assert item["sources"][item["answer"]] == item["document"] == k
            if kind == "other":  # three distractors from three different documents
                assert len(set(item["sources"])) == 4
            else:  # from within 4 sentences of the passage, the one before it included; never repeated
                assert len(set(others)) == 3 and all(abs(int(o.split()[3]) - i) <= 4 for o in others)
        assert {item["answer"] for item in items} == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="window=3"):
        continuation_items(documents, tokenizer, window=3)
    assert continuation_items(documents[:3], tokenizer, distractors="other") == []  # too few other documents
    capped = continuation_items(documents, tokenizer, distractors="same", seed=0, window=4, per_document=3)
    assert len(capped) == 4 * 3 and all(n == 3 for n in Counter(item["document"] for item in capped).values())
    repeated = [Document("r", "r", "news", ["the same line."] * 6)]  # candidates that are all one text: no item
    assert continuation_items(repeated, tokenizer, distractors="same", seed=0, window=4) == []
    with pytest.raises(ValueError, match="distractors='both'"):
        continuation_items(documents, tokenizer, distractors="both")


def test_choice_logits_score_each_item_alone_as_in_a_batch(tokenizer):
    documents = [Document(f"d{k}", f"d{k}", "news", [f"line {k} {i}." for i in range(5)]) for k in range(4)]
    items = continuation_items(documents, tokenizer, seed=0)[:3]
    model = classifier_from(None, 1, seed=0, model_config=tiny()).eval()
    with torch.no_grad():
        batched = choice_logits(model, items)
        alone = torch.cat([choice_logits(model, [item]) for item in items])
    assert batched.shape == (3, 4) and torch.allclose(batched, alone, atol=1e-5)
    # content pieces only (ids from FUNCTION_PIECES up): the commonest pieces and punctuation do not count
    passage = [5, 6, FUNCTION_PIECES, FUNCTION_PIECES + 1]
    assert overlap_scores([{"passage": passage, "options": [[FUNCTION_PIECES], [5, 6], [FUNCTION_PIECES + 1,
                                                                                          FUNCTION_PIECES], [7]]}]) == [[1, 0, 2, 0]]


def test_a_grid_resumes_from_its_kept_cells(tmp_path):
    jobs = [("sentiment", {"no such argument": k}) for k in range(2)]  # would fail if run
    for k in range(2):
        (tmp_path / f"{k}.json").write_text(json.dumps({"output": [k], "seconds": 1.0}))
    assert run_units(jobs, workers=1, keep=tmp_path) == [{"output": [0], "seconds": 1.0}, {"output": [1], "seconds": 1.0}]


def test_the_finetune_recipes_and_command(tmp_path):
    assert set(FINETUNE_RECIPES) == {"book", "full"}
    done = subprocess.run([sys.executable, "-m", "albert_edu", "finetune", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "--recipe" in done.stdout and "continuation" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "albert_edu", "finetune", "--workers", "0"], capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "--workers 0: expected at least 1" in bad.stderr


def test_the_command_fine_tunes_one_model_and_saves_it(tmp_path, tokenizer):
    start = tmp_path / "start"
    torch.manual_seed(0)
    AlbertForPreTraining(tiny()).save_pretrained(start)
    bare = tmp_path / "bare"  # the same weights with no tokenizer beside them: refused, never read with a guessed one
    shutil.copytree(start, bare)
    shutil.copyfile(DATA_DIR / "tokenizer" / "spiece.model", start / "spiece.model")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "albert_edu", "finetune", "--start", str(start), "--out", str(out),
                           "--epochs", "2", "--fold", "1"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "epoch 2: loss" in done.stdout and "held-out accuracy" in done.stdout
    lines = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert lines[0]["fold"] == 1 and lines[0]["epochs"] == 2 and [r["epoch"] for r in lines[1:]] == [1, 2]
    assert all(0 <= r["held_out_accuracy"] <= 1 for r in lines[1:])
    ours = AlbertForSequenceClassification.from_pretrained(out)
    theirs = transformers.AlbertForSequenceClassification.from_pretrained(out).eval()
    ids = torch.tensor([tokenizer.encode_pair(tokenizer.encode("a fine film."), [])[0][:-1]])
    with torch.no_grad():
        assert torch.allclose(ours.eval()(ids).logits, theirs(ids).logits, atol=1e-5)
    model, its_tokenizer = load_checkpoint_and_tokenizer(out, AlbertForSequenceClassification)
    assert its_tokenizer.vocab_size == tokenizer.vocab_size
    for bad, message in ((["--start", str(start), "--from-scratch"], "both given"),
                         (["--from-scratch"], "--out is required"),
                         (["--start", str(tmp_path / "none"), "--out", str(out)], "expected a checkpoint directory"),
                         (["--start", str(bare), "--out", str(out)], "has no spiece.model"),
                         (["--from-scratch", "--out", str(out), "--fold", "5"], "fold=5: expected an integer from 0 to 4")):
        failed = subprocess.run([sys.executable, "-m", "albert_edu", "finetune", *bad], capture_output=True, text=True)
        assert failed.returncode == 1 and message in failed.stderr, (bad, failed.stderr)


@pytest.mark.parametrize("recipe_name", ["book", "full"])
def test_the_committed_grid_holds_every_prediction(recipe_name):
    from albert_edu.experiments import run_dir, table5_runs

    grid = json.loads((DATA_DIR / "results" / f"finetune-{recipe_name}.json").read_text())
    recipe = FINETUNE_RECIPES[recipe_name]
    assert grid["command"] == f"albert-edu finetune --recipe {recipe_name}" and grid["seeds"] == list(recipe["seeds"])
    runs = {run.name: run_dir(run).name for run in table5_runs(recipe["pretraining"])}  # chapter 8's, keys included
    for contender, objective in (("MLM only", "none"), ("MLM + NSP", "nsp"), ("MLM + SOP", "sop")):
        assert set(grid["starts"][contender]) == {v for k, v in runs.items() if k.startswith(f"{objective}-")}
    assert len(grid["sentiment"]["folds"]) == 200 and sorted(set(grid["sentiment"]["folds"])) == list(range(recipe["folds"]))
    for name in ("from scratch", "MLM only", "MLM + NSP", "MLM + SOP"):
        assert len(grid["sentiment"][name]) == len(recipe["seeds"])
        assert all(len(p) == 200 and all(0 <= q <= 1 for q in p) for p in grid["sentiment"][name])
        fitted = grid["sentiment"]["train accuracy"][name]
        assert len(fitted) == len(recipe["seeds"]) and all(len(f) == recipe["folds"] for f in fitted)
        for kind in ("other", "same"):
            found = grid["continuation"][kind]
            assert len(found[name]) == len(recipe["seeds"])
            # eval_items is an upper limit: the held-out documents give about 600 items at 15 per document
            assert 500 < len(found["answers"]) <= recipe["continuation"]["eval_items"]
            assert all(len(p) == len(found["answers"]) and all(len(q) == 4 for q in p) for p in found[name])


def test_the_book_grid_s_first_cell_reproduces_its_committed_predictions():
    """Chapter 10 reads the committed sentiment grid; its first cell (the SOP-trained encoder of chapter 8's book
    recipe, seed 0, fold 0 held out) is fine-tuned again here, on one thread as the grid's workers run, and must
    give the stored probabilities to within rounding (processors differ: 5e-10 to 2e-8 seen), and the 50/50 loss
    the chapter reports (it never learns more than that)."""
    from albert_edu.downstream import predict_classes
    from albert_edu.finetune_recipes import sentiment_fold
    from albert_edu.experiments import table5_runs, train_all

    grid = json.loads((DATA_DIR / "results" / "finetune-book.json").read_text())
    start = train_all([run for run in table5_runs("book") if run.training.objective == "sop"])[0]
    assert grid["starts"]["MLM + SOP"] == [start.name]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    losses = []
    try:
        model, rows, _, _, test = sentiment_fold(str(start), 0, 0, FINETUNE_RECIPES["book"]["folds"],
                                                 FINETUNE_RECIPES["book"]["sentiment"],
                                                 on_epoch=lambda *args: losses.append(args[-1]["loss"]))
        live = [p[1] for p in predict_classes(model, [rows[i] for i in test])]
    finally:
        torch.set_num_threads(threads)
    stored = [grid["sentiment"]["MLM + SOP"][0][i] for i in test]
    assert max(abs(a - b) for a, b in zip(live, stored)) < 2e-3
    assert losses and all(abs(loss - np.log(2)) < 0.02 for loss in losses)
