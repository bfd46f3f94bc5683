"""The corpus and the tokenizer: the prepared data matches data/README.md, the tokenizer gives the same ids
as transformers' AlbertTokenizer, and bad input is reported, never silently lost."""

import json
import re
import subprocess
import sys

import pytest
import transformers

import albert_edu.corpus as corpus
from albert_edu.corpus import (CorpusError, Report, clean_wikitext, is_validation, load_documents, prepare_corpus,
                               read_text_documents, split_sentences)
from albert_edu.tokenizer import REQUIRED_CHARS, SPECIAL_TOKENS, Tokenizer, normalize
from albert_edu.tools.manifest import ROOT


def test_readme_statistics_match_the_prepared_corpus(tokenizer):
    stats = json.loads((ROOT / "data" / "prepared" / "stats.json").read_text())
    readme = (ROOT / "data" / "README.md").read_text()
    for split in ("train", "validation"):
        s = stats[split]
        tokens = sum(map(len, tokenizer.encode_batch([x for d in load_documents(split) for x in d.sentences])))
        row = (f"| {split} | {s['documents']} | {s['by_source']['enwiki']} | {s['by_source']['lee']} | "
               f"{s['sentences']:,} | {s['words']:,} | {tokens:,} |")
        assert row in readme


def test_validation_holds_out_whole_documents():
    train, validation = load_documents("train"), load_documents("validation")
    assert not {d.id for d in train} & {d.id for d in validation}
    assert all(is_validation(d) for d in validation) and not any(is_validation(d) for d in train)


def test_prepared_text_has_no_wiki_markup():
    text = "\n".join(s for split in ("train", "validation") for d in load_documents(split) for s in d.sentences)
    assert not re.search(r"\{\{|\}\}|\[\[|\]\]|<ref|\{\||''|thumb\||upright=|bgcolor=", text)


def test_an_unclosed_italic_does_not_hide_the_markup_after_it():
    text = "''An unclosed italic starts here. Text.\n[[File:X.png|thumb|A caption]]\n== Further reading ==\n* A book"
    assert clean_wikitext(text) == ["An unclosed italic starts here. Text."]


def test_tokenizer_gives_transformers_ids_on_validation_text(tokenizer):
    reference = transformers.AlbertTokenizer.from_pretrained(str(ROOT / "data" / "tokenizer"))
    sentences = [s for d in load_documents("validation") for s in d.sentences]
    assert reference(sentences, add_special_tokens=False)["input_ids"] == tokenizer.encode_batch(sentences)


def test_tokenizer_pair_layout_equals_transformers(tokenizer):
    reference = transformers.AlbertTokenizer.from_pretrained(str(ROOT / "data" / "tokenizer"))
    a, b = "The first segment.", "And the second one."
    ids, types = tokenizer.encode_pair(tokenizer.encode(a), tokenizer.encode(b))
    assert ids == reference(a, b)["input_ids"]
    assert types == [0] * (ids.index(3) + 1) + [1] * (len(ids) - ids.index(3) - 1)


@pytest.mark.parametrize("text", ["paris is the [MASK] of france", "[CLS] it rained. [SEP] the streets were wet. [SEP]",
                                  "a [MASK][MASK] b", "the[MASK]of", "he said [MASK].", "<unk> and <pad>",
                                  "the [mask] and [Mask] are text, not special tokens"])
def test_a_special_token_typed_in_text_becomes_its_id_as_in_transformers(tokenizer, text):
    reference = transformers.AlbertTokenizer.from_pretrained(str(ROOT / "data" / "tokenizer"))
    assert tokenizer.encode(text) == reference(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.encode_batch([text, "plain text"]) == [tokenizer.encode(text), tokenizer.encode("plain text")]


def test_a_typed_mask_gives_the_mask_id(tokenizer):
    ids = tokenizer.encode("paris is the [MASK] of france")
    assert ids.count(tokenizer.mask_id) == 1 and tokenizer.pieces(ids)[3] == "[MASK]"


def test_special_tokens_have_albert_ids(tokenizer):
    assert tokenizer.pieces(range(5)) == list(SPECIAL_TOKENS)
    assert SPECIAL_TOKENS == {"<pad>": 0, "<unk>": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}


def test_every_character_of_ordinary_prose_is_a_piece_not_unknown(tokenizer, validation_documents):
    for ch in REQUIRED_CHARS:
        assert Tokenizer.unk_id not in tokenizer.encode(f"a{ch}b {ch}"), ch
    ids = [i for d in validation_documents for s in tokenizer.encode_batch(d.sentences) for i in s]
    assert ids.count(Tokenizer.unk_id) / len(ids) < 0.002


def test_normalization_removes_accents_straightens_quotes_and_lowercases():
    assert normalize("``Ça va'' ÉTÉ") == '"ca va" ete'


def test_training_is_deterministic(tmp_path):
    from albert_edu.tokenizer import train_tokenizer

    def pieces_and_scores(path):
        sp = Tokenizer(path).sp
        return [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]

    # the model files differ only in the output path they record
    first = pieces_and_scores(train_tokenizer(tmp_path / "a", vocab_size=1000))
    assert first == pieces_and_scores(train_tokenizer(tmp_path / "b", vocab_size=1000))


def test_wikitext_cleaning_keeps_prose_and_drops_markup():
    text = ("'''Bold''' text{{template|x}} with a [[target|link]].<ref>cite</ref>\n"
            "{| class=wikitable\n| cell\n|}\n== See also ==\n* [[Other]]\n")
    assert clean_wikitext(text) == ["Bold text with a link."]


def test_unparseable_markup_lines_are_counted_not_kept():
    report = Report()
    assert clean_wikitext("Fine line.\n| bgcolor=lime | [[Broken|W", report) == ["Fine line."]
    assert sum(report.skipped.values()) == 1


def test_sentence_splitter_respects_abbreviations_and_initials():
    assert split_sentences("Dr. Smith met J. R. R. Tolkien in 1950. They talked.") == [
        "Dr. Smith met J. R. R. Tolkien in 1950.", "They talked."]


def test_non_utf8_file_is_an_error_naming_the_byte(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"ok \xff\xfe text")
    with pytest.raises(CorpusError, match="bad.txt is not UTF-8 text: byte 3 is 0xff"):
        read_text_documents(path, "x", Report())


def test_empty_files_and_one_sentence_documents_are_skipped_with_reasons(tmp_path):
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "docs.txt").write_text("One sentence only.\n\nTwo sentences. Here they are.\n")
    report = Report()
    docs = read_text_documents(tmp_path / "empty.txt", "x", report) + read_text_documents(tmp_path / "docs.txt", "x", report)
    assert [d.sentences for d in docs] == [["Two sentences.", "Here they are."]]
    assert report.skipped == {"empty file empty.txt": 1,
                              "document with fewer than 2 sentences (no sentence pair can be made)": 1}


def test_over_long_sentences_are_skipped_with_a_reason(tmp_path):
    (tmp_path / "long.txt").write_text("A " * 1500 + "end. Short one. Another one.\n")
    report = Report()
    docs = read_text_documents(tmp_path / "long.txt", "x", report)
    assert docs[0].sentences == ["Short one.", "Another one."]
    assert report.skipped == {"sentence longer than 2000 characters": 1}


@pytest.mark.parametrize("damage", ["empty", "truncated", "not a model"])
def test_a_damaged_tokenizer_model_is_an_error_naming_the_file(damage, tmp_path):
    good = (ROOT / "data" / "tokenizer" / "spiece.model").read_bytes()
    data = {"empty": b"", "truncated": good[:1000], "not a model": b'{"json": "instead"}'}[damage]
    (tmp_path / "spiece.model").write_bytes(data)
    with pytest.raises(ValueError, match="spiece.model is not a readable SentencePiece model"):
        Tokenizer.load(tmp_path)
    with pytest.raises(FileNotFoundError, match="run `albert-edu train-tokenizer`"):
        Tokenizer.load(tmp_path / "missing")


@pytest.mark.parametrize("kind", ["directory", "missing"])
def test_an_extra_corpus_file_must_be_a_file(kind, tmp_path):
    path = tmp_path / "extra"
    if kind == "directory":
        path.mkdir()
    with pytest.raises(CorpusError, match=f"extra file {path}: expected a UTF-8 text file, found "
                                          f"{'a directory' if kind == 'directory' else 'no such file'}"):
        prepare_corpus(tmp_path / "data", (path,))
    assert not (tmp_path / "data").exists()  # nothing fetched or written


def test_an_interrupted_preparation_is_never_taken_as_complete(tmp_path, monkeypatch):
    data = tmp_path / "data"
    (data / "raw").mkdir(parents=True)
    for path in (ROOT / "data" / "raw").iterdir():
        (data / "raw" / path.name).symlink_to(path)
    (data / "prepared").mkdir()
    for name in ("train.jsonl", "validation.jsonl", "stats.json"):  # a complete earlier preparation
        (data / "prepared" / name).write_bytes((ROOT / "data" / "prepared" / name).read_bytes())
    extra = tmp_path / "extra.txt"
    extra.write_text("One sentence here. And a second one.\n")
    written = corpus.write_atomically

    def killed_after_one_file(path, content):
        written(path, content)
        raise KeyboardInterrupt  # Ctrl-C between the two split files

    monkeypatch.setattr(corpus, "write_atomically", killed_after_one_file)
    with pytest.raises(KeyboardInterrupt):
        prepare_corpus(data, (extra,))
    assert not (data / "prepared" / "stats.json").exists()  # so the next run prepares again
    monkeypatch.undo()
    stats = prepare_corpus(data)
    assert stats["train"] == json.loads((ROOT / "data" / "prepared" / "stats.json").read_text())["train"]


def test_load_documents_rejects_an_unknown_split():
    with pytest.raises(ValueError, match="split='test'"):
        load_documents("test")


def test_cli_reports_missing_prepared_data(tmp_path):
    result = subprocess.run([sys.executable, "-m", "albert_edu", "train-tokenizer", "--data-dir", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "run `albert-edu prepare-data` first" in result.stderr


def test_cli_prepare_data_is_idempotent_and_reports_statistics():
    prepared = ROOT / "data" / "prepared"
    before = {p.name: p.stat().st_mtime_ns for p in prepared.iterdir()}
    result = subprocess.run([sys.executable, "-m", "albert_edu", "prepare-data"], capture_output=True, text=True)
    assert result.returncode == 0 and "train: 339 documents" in result.stdout
    assert {p.name: p.stat().st_mtime_ns for p in prepared.iterdir()} == before  # nothing was rewritten


def test_cli_reports_an_impossible_vocabulary_size(tmp_path):
    result = subprocess.run([sys.executable, "-m", "albert_edu", "train-tokenizer", "--vocab-size", "3",
                             "--out", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode != 0 and "vocab_size=3: expected more than the 5 special tokens" in result.stderr


GOOD_LINE = json.dumps({"id": "x:1", "title": "T", "source": "x", "sentences": ["One.", "Two."]}).encode() + b"\n"


@pytest.mark.parametrize("damage, problem", [
    (GOOD_LINE + b'{"id": "x:2", "title": "caf\xe9"}\n', "line 2 is not UTF-8 text"),
    (GOOD_LINE + GOOD_LINE[:30], "line 2 ends without a newline (the file was cut short)"),
    (GOOD_LINE + GOOD_LINE[:27] + b"\n", "line 2 is not a JSON record (Expecting property name"),
    (GOOD_LINE + b'{"id": "x:2", "title": "T", "source": "x"}\n',
     "line 2 holds ['id', 'source', 'title']; expected a record of the fields ['id', 'sentences', 'source', 'title']"),
    (GOOD_LINE + b'["x:2", "T", "x", []]\n', "line 2 holds a JSON list"),
    (GOOD_LINE + b'{"id": 2, "title": "T", "source": "x", "sentences": ["One.", "Two."]}\n',
     "line 2 has a field of the wrong type"),
])
def test_damaged_prepared_data_is_an_error_naming_the_file_and_line(damage, problem, tmp_path, prepared_copy):
    data = prepared_copy(tmp_path / "data", train=damage)
    with pytest.raises(CorpusError) as error:
        load_documents("train", data)
    assert str(error.value).startswith(f"{data / 'prepared' / 'train.jsonl'}, {problem}")
    assert str(error.value).endswith("run `albert-edu prepare-data --force` to rebuild the prepared corpus")


def test_a_command_on_damaged_prepared_data_exits_1_with_the_message_and_writes_nothing(tmp_path, prepared_copy):
    data = prepared_copy(tmp_path / "data", train=GOOD_LINE[:-1])
    result = subprocess.run([sys.executable, "-m", "albert_edu", "make-examples", "--objective", "sop", "--out",
                             str(tmp_path / "x.jsonl"), "--data-dir", str(data)], capture_output=True, text=True)
    assert result.returncode == 1 and result.stderr == (
        f"error: {data / 'prepared' / 'train.jsonl'}, line 1 ends without a newline (the file was cut short); run "
        f"`albert-edu prepare-data --force` to rebuild the prepared corpus\n")
    assert not (tmp_path / "x.jsonl").exists()


def test_a_tokenizer_interrupted_after_its_model_is_not_taken_for_a_finished_one(tmp_path, monkeypatch, prepared_copy):
    """The stamp that says which vocabulary a spiece.model was trained for goes before training starts, so a
    model written by a run that then failed is retrained, not returned for another vocabulary size."""
    import albert_edu.tokenizer as tokenizer_module

    held_out = (ROOT / "data" / "prepared" / "validation.jsonl").read_bytes().splitlines(keepends=True)
    data = prepared_copy(tmp_path / "data", train=b"".join(held_out[:60]))
    out = tmp_path / "tokenizer"
    assert Tokenizer(tokenizer_module.train_tokenizer(out, 400, data)).vocab_size == 400
    trained = tokenizer_module._train

    def interrupted_after_the_model(*args):
        trained(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(tokenizer_module, "_train", interrupted_after_the_model)
    with pytest.raises(KeyboardInterrupt):
        tokenizer_module.train_tokenizer(out, 500, data)
    assert Tokenizer(out / "spiece.model").vocab_size == 500 and not (out / "training.json").exists()
    calls = []
    monkeypatch.setattr(tokenizer_module, "_train", lambda *args: calls.append(args[1]))
    tokenizer_module.train_tokenizer(out, 400, data)  # trains again rather than return the 500-piece model
    (out / "training.json").write_text('{"vocab_size": 4')  # a stamp cut short counts as none
    tokenizer_module.train_tokenizer(out, 400, data)
    assert calls == [400, 400]


def test_prepare_data_force_rebuilds_a_damaged_split_that_stats_json_calls_up_to_date(tmp_path):
    """The advice of every damaged-data error: without --force, prepare-data trusts its stats.json and keeps the
    damaged file; with it, the file is made again, byte for byte as before."""
    from albert_edu.tools.cli import main

    data = tmp_path / "data"
    (data / "raw").mkdir(parents=True)
    for path in (ROOT / "data" / "raw").iterdir():
        (data / "raw" / path.name).symlink_to(path)
    (data / "prepared").mkdir()
    for name in ("train.jsonl", "validation.jsonl", "stats.json"):
        (data / "prepared" / name).write_bytes((ROOT / "data" / "prepared" / name).read_bytes())
    whole = (data / "prepared" / "train.jsonl").read_bytes()
    (data / "prepared" / "train.jsonl").write_bytes(whole[:1000])  # cut short
    assert main(["prepare-data", "--data-dir", str(data)]) == 0
    assert (data / "prepared" / "train.jsonl").read_bytes() == whole[:1000]
    assert main(["prepare-data", "--data-dir", str(data), "--force"]) == 0
    assert (data / "prepared" / "train.jsonl").read_bytes() == whole
