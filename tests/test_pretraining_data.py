"""Pre-training examples: properties of pairs and masking for any documents (hypothesis), determinism, the
command line, and the batch layout."""

import json
import random
import shutil
import subprocess
from collections import Counter
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from albert_edu.corpus import load_documents
from albert_edu.pretraining_data import (FUNCTION_PIECES, Example, best_threshold, choose_spans, collate,
                                         PAIR_RECIPES, create_examples, mask_ngrams, overlap, read_examples,
                                         segment_pairs, truncate_pair, word_units)
from albert_edu.tokenizer import SPECIAL_TOKENS, Tokenizer, starts_unit

TOKENIZER = Tokenizer.load()
NON_SPECIAL = st.integers(min_value=len(SPECIAL_TOKENS), max_value=TOKENIZER.vocab_size - 1)
SENTENCE = st.lists(NON_SPECIAL, min_size=1, max_size=40)
DOCUMENTS = st.lists(st.lists(SENTENCE, min_size=1, max_size=8), min_size=2, max_size=5)


@settings(max_examples=60, deadline=None)
@given(documents=DOCUMENTS, objective=st.sampled_from(["sop", "nsp", "none"]),
       max_seq_len=st.integers(min_value=5, max_value=96), seed=st.integers(0, 2**16),
       pairs=st.sampled_from(PAIR_RECIPES))
def test_pairs_fit_and_sop_pairs_come_from_one_document(documents, objective, max_seq_len, seed, pairs):
    text = {d: [t for s in doc for t in s] for d, doc in enumerate(documents)}
    for a, b, label in segment_pairs(documents, objective, max_seq_len, random.Random(seed), pairs=pairs):
        assert a and b and len(a) + len(b) <= max_seq_len - 3
        assert label in (0, 1) and (label == 0 or objective != "none")
        if objective in ("sop", "none"):  # both segments from one document, in order unless swapped
            first, second = (b, a) if label else (a, b)
            assert any(j >= i + len(first) for tokens in text.values()
                       for i in _starts(tokens, first) for j in _starts(tokens, second))


def _starts(haystack: list[int], needle: list[int]) -> list[int]:
    n = len(needle)
    return [i for i in range(len(haystack) - n + 1) if haystack[i:i + n] == needle]


def _contains(haystack: list[int], needle: list[int]) -> bool:
    return bool(_starts(haystack, needle))


@settings(max_examples=60, deadline=None)
@given(a=st.lists(NON_SPECIAL, max_size=60), b=st.lists(NON_SPECIAL, max_size=60),
       max_tokens=st.integers(2, 50), seed=st.integers(0, 1000))
def test_truncation_keeps_a_contiguous_piece_of_each_segment(a, b, max_tokens, seed):
    short_a, short_b = list(a), list(b)
    truncate_pair(short_a, short_b, max_tokens, random.Random(seed))
    assert len(short_a) + len(short_b) <= max(max_tokens, 0) or not (short_a or short_b)
    assert _contains(a, short_a) and _contains(b, short_b)


@settings(max_examples=80, deadline=None)
@given(a=st.lists(NON_SPECIAL, min_size=1, max_size=80), b=st.lists(NON_SPECIAL, min_size=1, max_size=80),
       seed=st.integers(0, 2**16))
def test_masking_respects_layout_budget_and_whole_words(a, b, seed):
    ids, types = TOKENIZER.encode_pair(a, b)
    masked, positions, labels = mask_ngrams(ids, TOKENIZER, random.Random(seed))
    assert positions == sorted(set(positions))
    assert len(positions) <= min(20, max(1, round(len(ids) * 0.15)))
    assert [ids[p] for p in positions] == labels
    assert all(ids[p] >= len(SPECIAL_TOKENS) for p in positions)  # never [CLS] or [SEP]
    assert all(masked[i] == ids[i] for i in range(len(ids)) if i not in set(positions))
    chosen = set(positions)
    for word in word_units(ids, TOKENIZER):  # a word is masked entirely or not at all
        assert chosen.issuperset(word) or chosen.isdisjoint(word)


def test_masking_replacement_split_is_80_10_10():
    rng = random.Random(0)
    ids, _ = TOKENIZER.encode_pair(list(range(100, 160)), list(range(200, 260)))
    shown = []
    for _ in range(2000):
        masked, positions, labels = mask_ngrams(ids, TOKENIZER, rng)
        shown += ["mask" if masked[p] == TOKENIZER.mask_id else "same" if masked[p] == l else "random"
                  for p, l in zip(positions, labels)]
    assert abs(shown.count("mask") / len(shown) - 0.8) < 0.01
    assert abs(shown.count("same") / len(shown) - 0.1) < 0.01


@pytest.mark.parametrize("objective", ["sop", "nsp", "none"])
def test_examples_are_deterministic_for_a_seed(objective, validation_documents):
    first = create_examples(validation_documents, TOKENIZER, objective, 64, seed=3)
    assert first == create_examples(validation_documents, TOKENIZER, objective, 64, seed=3)
    assert first != create_examples(validation_documents, TOKENIZER, objective, 64, seed=4)


@pytest.mark.parametrize("objective", ["sop", "nsp"])
def test_about_half_of_the_pairs_are_negatives(objective, validation_documents):
    examples = create_examples(validation_documents, TOKENIZER, objective, 128, seed=0)
    assert abs(sum(e.pair_label for e in examples) / len(examples) - 0.5) < 0.07


def test_examples_have_albert_layout(validation_documents):
    for e in create_examples(validation_documents, TOKENIZER, "sop", 128, seed=0):
        assert e.input_ids[0] == TOKENIZER.cls_id and e.input_ids[-1] == TOKENIZER.sep_id
        assert len(e.input_ids) <= 128 and len(e.token_type_ids) == len(e.input_ids)
        first_sep = e.input_ids.index(TOKENIZER.sep_id)
        assert e.token_type_ids == [0] * (first_sep + 1) + [1] * (len(e.input_ids) - first_sep - 1)


def test_unknown_objective_and_too_short_sequences_are_errors():
    with pytest.raises(ValueError, match="objective='mlm'"):
        list(segment_pairs([[[5, 6]]], "mlm", 64, random.Random(0)))
    with pytest.raises(ValueError, match="max_seq_len=4"):
        list(segment_pairs([[[5, 6]]], "sop", 4, random.Random(0)))


def test_collate_pads_to_the_longest_and_marks_labels():
    examples = [Example([2, 10, 4, 3, 11, 3], [0, 0, 0, 0, 1, 1], [2], [12], 1),
                Example([2, 13, 3, 14, 3], [0, 0, 0, 1, 1], [], [], 0)]
    batch = collate(examples)
    assert batch["input_ids"].tolist() == [[2, 10, 4, 3, 11, 3], [2, 13, 3, 14, 3, 0]]
    assert batch["attention_mask"].tolist() == [[1] * 6, [1] * 5 + [0]]
    assert batch["labels"].tolist() == [[-100, -100, 12, -100, -100, -100], [-100] * 6]
    assert torch.equal(batch["sentence_order_label"], torch.tensor([1, 0]))


def test_cli_writes_examples_that_read_back(tmp_path):
    out = tmp_path / "sop.jsonl"
    result = subprocess.run([sys.executable, "-m", "albert_edu", "make-examples", "--objective", "sop", "--out",
                             str(out), "--seed", "1", "--max-seq-len", "64", "--split", "validation"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    examples = read_examples(out)
    assert examples == create_examples(load_documents("validation"), TOKENIZER, "sop", 64, seed=1)
    assert set(json.loads(out.read_text().splitlines()[0])) == {
        "input_ids", "token_type_ids", "mlm_positions", "mlm_labels", "pair_label", "document", "whole"}
    neutral = tmp_path / "neutral.jsonl"
    result = subprocess.run([sys.executable, "-m", "albert_edu", "make-examples", "--objective", "nsp", "--out",
                             str(neutral), "--pairs", "neutral", "--split", "validation"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert read_examples(neutral) == create_examples(load_documents("validation"), TOKENIZER, "nsp", 128, seed=0,
                                                     pairs="neutral")


@pytest.mark.parametrize("arguments, message", [
    (["--objective", "mlm"], "invalid choice: 'mlm'"),
    (["--objective", "sop", "--max-seq-len", "3"], "--max-seq-len 3: expected at least 5"),
    (["--objective", "sop", "--pairs", "even"], "argument --pairs: invalid choice: 'even'"),
])
def test_cli_rejects_bad_arguments(arguments, message, tmp_path):
    result = subprocess.run([sys.executable, "-m", "albert_edu", "make-examples", "--out", str(tmp_path / "x"),
                             *arguments], capture_output=True, text=True)
    assert result.returncode != 0 and message in result.stderr


def test_cli_refuses_to_write_no_examples(tmp_path):
    """An empty training split (or one with no document of two sentences) is an error that names the file and the
    command that rebuilds it, and writes nothing: an empty examples file would pass for a finished one."""
    from albert_edu.corpus import DATA_DIR

    (tmp_path / "prepared").mkdir()
    (tmp_path / "prepared" / "train.jsonl").write_text("")
    shutil.copytree(DATA_DIR / "tokenizer", tmp_path / "tokenizer")
    out = tmp_path / "examples.jsonl"
    result = subprocess.run([sys.executable, "-m", "albert_edu", "make-examples", "--objective", "sop", "--out", str(out),
                             "--data-dir", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 1 and not out.exists()
    assert f"no sop examples from the 0 documents of {tmp_path / 'prepared' / 'train.jsonl'}" in result.stderr
    assert "run `albert-edu prepare-data --force` to rebuild the prepared corpus" in result.stderr


LONG = 2000  # no truncation and one chunk per document for the generated documents below


@settings(max_examples=60, deadline=None)
@given(documents=DOCUMENTS, seed=st.integers(0, 2**16), pairs=st.sampled_from(PAIR_RECIPES))
def test_sop_and_none_pairs_are_consecutive_text_of_one_document_in_or_out_of_order(documents, seed, pairs):
    texts = [[t for s in doc for t in s] for doc in documents]
    for objective in ("sop", "none"):
        for a, b, label in segment_pairs(documents, objective, LONG, random.Random(seed), short_seq_prob=0,
                                         pairs=pairs):
            first, second = (b, a) if label else (a, b)
            assert any(_contains(text, first + second) for text in texts)


@settings(max_examples=60, deadline=None)
@given(documents=DOCUMENTS, seed=st.integers(0, 2**16), pairs=st.sampled_from(PAIR_RECIPES))
def test_nsp_negatives_come_from_another_document_and_positives_are_consecutive(documents, seed, pairs):
    texts = [[t for s in doc for t in s] for doc in documents]
    for a, b, label in segment_pairs(documents, "nsp", LONG, random.Random(seed), short_seq_prob=0, pairs=pairs):
        homes = [d for d, text in enumerate(texts) if _contains(text, a)]
        if label == 0:
            assert any(_contains(texts[d], a + b) for d in homes)
        else:
            assert any(_contains(text, b) for d, text in enumerate(texts) if d not in homes or len(homes) > 1)


@settings(max_examples=80, deadline=None)
@given(documents=DOCUMENTS, seed=st.integers(0, 2**16), short_seq_prob=st.sampled_from([0.0, 0.5, 1.0]),
       pairs=st.sampled_from(PAIR_RECIPES))
def test_sop_and_none_never_cut_inside_a_sentence(documents, seed, short_seq_prob, pairs):
    # every sentence of every document is a run of one distinct token, so a segment's edges show where it was cut
    documents = [[[1000 * d + 10 * i + 7] * len(s) for i, s in enumerate(doc)] for d, doc in enumerate(documents)]
    length = {s[0]: len(s) for doc in documents for s in doc}
    for objective in ("sop", "none"):
        for a, b, label in segment_pairs(documents, objective, LONG, random.Random(seed), short_seq_prob, pairs=pairs):
            first, second = (b, a) if label else (a, b)
            # first ends where a sentence ends and second starts where the next one starts: whole sentences
            assert first[-1] != second[0], (first, second)
            for segment in (a, b):
                runs = [t for i, t in enumerate(segment) if i == 0 or segment[i - 1] != t]
                assert all(segment.count(t) == length[t] for t in runs), segment


def test_a_single_sentence_document_makes_no_sop_pair_and_an_nsp_pair_from_another_document():
    documents = [[[11] * 9], [[22] * 5, [23] * 5]]
    counts = Counter()
    assert list(segment_pairs(documents[:1], "sop", LONG, random.Random(0), counts=counts)) == []
    assert counts == {"chunks": 1, "skipped chunks": 1, "skipped tokens": 9}
    pairs = list(segment_pairs(documents, "nsp", LONG, random.Random(0), short_seq_prob=0))
    assert ([11] * 9, 1) in [(a, label) for a, _, label in pairs]


def _length_gaps(documents, pairs, seeds=range(3)):
    """Per seed, label 1 minus label 0: the mean NSP pair length (tokens), the share of NSP pairs that fill the
    sequence, and the share of SOP pairs whose second segment is the longer."""
    def mean_by(found, label, feature):
        values = [feature(a, b) for a, b, y in found if y == label]
        return sum(values) / len(values)

    gaps = []
    for seed in seeds:
        nsp = list(segment_pairs(documents, "nsp", 128, random.Random(seed), pairs=pairs))
        sop = list(segment_pairs(documents, "sop", 128, random.Random(seed), pairs=pairs))
        features = [(nsp, lambda a, b: len(a) + len(b)), (nsp, lambda a, b: len(a) + len(b) == 125),
                    (sop, lambda a, b: len(b) > len(a))]
        gaps.append([mean_by(found, 1, f) - mean_by(found, 0, f) for found, f in features])
    return gaps


def test_neutral_pairs_have_the_same_lengths_under_either_label_and_reference_pairs_do_not():
    documents = [TOKENIZER.encode_batch(d.sentences) for d in load_documents("validation")] * 4
    reference, neutral = _length_gaps(documents, "reference"), _length_gaps(documents, "neutral")
    # the reference: random Bs stop at their document's end, and the long sentence that ends a chunk goes to B
    assert all(tokens < -3 and full < -0.08 and longer < -0.07 for tokens, full, longer in reference), reference
    assert all(abs(tokens) < 1.5 and abs(full) < 0.03 and abs(longer) < 0.04 for tokens, full, longer in neutral), neutral


def test_a_neutral_random_b_is_whole_sentences_of_another_document_as_long_as_the_b_it_replaces():
    from albert_edu.pretraining_data import _even_cut, _random_b

    assert _even_cut([[1] * 5, [2], [3], [4] * 5]) == 2 and _even_cut([[1] * 10, [2], [3]]) == 1
    documents = [[[d * 100 + i] * (i + 1) for i in range(8)] for d in range(5)]  # sentence i: i + 1 copies of d*100+i
    rng = random.Random(0)
    for _ in range(200):
        d, shortest = rng.randrange(5), rng.randint(1, 30)
        b, other = _random_b(documents, d, shortest, shortest + 2, rng)
        assert shortest <= len(b) <= shortest + 2 and b[0] // 100 == other != d
        sentences = [b[i:i + b[i] % 100 + 1] for i in range(len(b)) if i == 0 or b[i] != b[i - 1]]
        home = documents[b[0] // 100]
        assert sum(map(len, sentences)) == len(b) and all(s in home for s in sentences)  # whole sentences
        first = home.index(sentences[0])
        assert [home.index(s) for s in sentences] == list(range(first, first + len(sentences))) and first > 0
    # no run is long enough: the one that misses the range by least, a whole document but its first sentence
    assert len(_random_b(documents, 0, 100, 110, random.Random(1))[0]) == sum(range(2, 9))


def test_a_neutral_random_b_is_news_as_often_as_a_true_b_and_a_reference_one_is_not():
    documents = load_documents("validation") * 4
    tokenized = [TOKENIZER.encode_batch(d.sentences) for d in documents]
    for pairs in PAIR_RECIPES:
        sources = []
        labels = [label for _, _, label in segment_pairs(tokenized, "nsp", 128, random.Random(0), sources=sources,
                                                         pairs=pairs)]
        assert all(label or a_home == b_home for label, (a_home, _, b_home) in zip(labels, sources))
        news = [sum(documents[b_home].source == "lee" for label, (_, _, b_home) in zip(labels, sources) if label == y)
                / labels.count(y) for y in (0, 1)]
        if pairs == "reference":  # drawn uniformly over documents, and most documents are short news stories
            assert news[1] > 2 * news[0], news
        else:  # drawn by text, as the As are
            assert abs(news[1] - news[0]) < 0.05, news


def test_an_unknown_pair_recipe_is_refused_by_name():
    with pytest.raises(ValueError, match="pairs='balanced'.*reference"):
        list(segment_pairs([[[5, 6]]], "sop", 64, random.Random(0), pairs="balanced"))


def test_nsp_uses_every_sentence_of_a_document_for_segment_a_or_consecutive_b():
    documents = [[[10 + d * 100 + i] * 3 for i in range(6)] for d in range(4)]  # distinct sentences
    used = [t for a, b, label in segment_pairs(documents, "nsp", LONG, random.Random(1), short_seq_prob=0)
            for t in (a if label else a + b)]
    assert sorted(set(used)) == sorted({t for doc in documents for s in doc for t in s})


def test_short_sequences_are_made_for_about_a_tenth_of_the_documents(validation_documents):
    examples = create_examples(validation_documents * 4, TOKENIZER, "sop", 128, seed=0)
    short = sum(len(e.input_ids) < 100 for e in examples) / len(examples)
    assert 0.04 < short < 0.25


def test_word_units_follow_albert_rule_on_real_pieces():
    ids, _ = TOKENIZER.encode_pair(TOKENIZER.encode("The cat's hat, red."), [])
    units = [TOKENIZER.pieces([ids[p] for p in unit]) for unit in word_units(ids, TOKENIZER)]
    assert units == [["▁the"], ["▁cat"], ["'", "s"], ["▁hat"], [","], ["▁red"], ["."]]


@pytest.mark.parametrize("piece, starts", [("▁cat", True), ("▁", True), ("<unk>", True), (",", True), ("?", True),
                                           ("s", False), ("ing", False), ("1", True), ("s1", True), ("'s", True),
                                           ("=", True), ("ß", True), ("-", True), ("a-", False)])
def test_a_unit_starts_where_albert_reference_rule_says(piece, starts):
    # create_pretraining_data.py's _is_start_piece_sp: its punctuation set lacks ' < = >, so a piece holding
    # one of those (like any digit or non-English letter) starts a unit, and "a-" continues the word before
    assert starts_unit(piece) is starts


def test_unknown_pieces_can_be_masked_and_special_tokens_cannot():
    ids = [Tokenizer.cls_id, *TOKENIZER.encode("a cat"), Tokenizer.unk_id, *TOKENIZER.encode("sat"), Tokenizer.sep_id]
    positions = [p for unit in word_units(ids, TOKENIZER) for p in unit]
    assert ids.index(Tokenizer.unk_id) in positions
    assert 0 not in positions and len(ids) - 1 not in positions


def test_masking_covers_about_15_percent_with_mostly_single_word_spans(validation_documents):
    examples = create_examples(validation_documents, TOKENIZER, "sop", 128, seed=0)
    coverage = sum(len(e.mlm_positions) for e in examples) / sum(len(e.input_ids) for e in examples)
    assert 0.13 < coverage < 0.16
    rng, lengths = random.Random(0), [0, 0, 0, 0]
    for e in examples:
        original = list(e.input_ids)
        for p, label in zip(e.mlm_positions, e.mlm_labels):
            original[p] = label
        budget = min(20, max(1, round(len(original) * 0.15)))
        for n, _ in choose_spans(word_units(original, TOKENIZER), budget, rng):
            lengths[n] += 1
    total = sum(lengths)
    assert abs(lengths[1] / total - 6 / 11) < 0.1 and lengths[1] > lengths[2] > lengths[3] > 0.1 * total


def test_normalization_matches_transformers_on_accents_and_quotes():
    import transformers

    from albert_edu.tools.manifest import ROOT

    reference = transformers.AlbertTokenizer.from_pretrained(str(ROOT / "data" / "tokenizer"))
    text = "``Crème brûlée'' à São Paulo, ÉTÉ 1999"
    assert reference(text, add_special_tokens=False)["input_ids"] == TOKENIZER.encode(text)


@settings(max_examples=60, deadline=None)
@given(documents=st.lists(st.lists(st.lists(NON_SPECIAL, max_size=30), max_size=6), min_size=2, max_size=6),
       objective=st.sampled_from(["sop", "nsp", "none"]), max_seq_len=st.integers(min_value=5, max_value=64),
       seed=st.integers(0, 2**16))
def test_sources_name_the_caller_s_documents_of_a_and_b_and_whether_the_pair_was_shortened(documents, objective,
                                                                                            max_seq_len, seed):
    # every token says which document it is from, so A's tokens name its document; empty sentences and
    # documents (skipped by segment_pairs) must not shift the indices
    documents = [[[1000 + d] * len(s) for s in doc] for d, doc in enumerate(documents)]
    rng, untouched, sources = random.Random(seed), random.Random(seed), []
    pairs = list(segment_pairs(documents, objective, max_seq_len, rng, sources=sources))
    assert len(sources) == len(pairs)
    for (a, b, label), (document, whole, b_document) in zip(pairs, sources):
        first, second = (b, a) if objective == "sop" and label else (a, b)
        assert set(first) == {1000 + document} and set(second) == {1000 + b_document}
        if not whole:
            assert len(a) + len(b) == max_seq_len - 3  # shortened to exactly the room there is
    assert pairs == list(segment_pairs(documents, objective, max_seq_len, untouched))  # recording changes nothing


def test_examples_carry_their_document_and_old_example_files_still_read(validation_documents, tmp_path):
    examples = create_examples(validation_documents[:6], TOKENIZER, "sop", 64, seed=0)
    assert {e.document for e in examples} <= set(range(6)) and len({e.document for e in examples}) > 1
    assert any(e.whole for e in examples) and all(isinstance(e.whole, bool) for e in examples)
    old = {"input_ids": [2, 10, 3, 11, 3], "token_type_ids": [0, 0, 0, 1, 1], "mlm_positions": [], "mlm_labels": [],
           "pair_label": 0}  # a line written before examples recorded their document
    (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n")
    assert read_examples(tmp_path / "old.jsonl")[0].document == -1


def test_overlap_counts_content_pieces_only_and_the_threshold_separates_the_labels():
    common, content = FUNCTION_PIECES - 1, FUNCTION_PIECES
    assert overlap([common, content, content + 1], [common, content]) == 0.5  # {c, c+1} and {c}: 1 of 2
    assert overlap([TOKENIZER.cls_id, common], [TOKENIZER.sep_id, common]) == 0.0  # nothing but function pieces
    assert overlap([content], [content]) == 1.0 and overlap([content], [content + 1]) == 0.0
    scored = [(0.0, 1), (0.1, 1), (0.3, 0), (0.5, 0)]  # low overlap: label 1
    threshold = best_threshold(scored)
    assert threshold == 0.3 and all((score < threshold) == bool(label) for score, label in scored)
    with pytest.raises(ValueError, match="at least one"):
        best_threshold([])
