"""The large corpus (section 2.5): the cleaning rules of each kind of source, verification of the packages, the
split, and prepare_large end to end on packages made here; the prepared corpus matches data/README.md."""

import bz2
import io
import json
import re
import tarfile
from pathlib import Path

import pytest

import albert_edu.sources as sources
from albert_edu.corpus import CorpusError, Document
from albert_edu.sources import (LARGE_DIR, SOURCES, Source, files_digest, held_out_ids, is_prose, parts,
                                prepare_large, read_brown, read_gutenberg, read_html)

ROOT = Path(__file__).parent.parent


def test_html_keeps_the_prose_paragraphs_and_nothing_around_them():
    page = b"""<html><head><title>Joins &amp; keys</title><style>p { color: red }</style></head><body>
    <nav><p>Home of the manual, where the table of contents is kept for you.</p></nav>
    <div class="sphinxsidebar"><p>Previous topic: the section before this one in the manual.</p></div>
    <p>A join combines the rows of two tables by a <code>key</code> that both of them share.</p>
    <pre><p>this paragraph sits inside a code block and is not kept at all</p></pre>
    <table><tr><td><p>A cell of a table is a fragment and is not kept either.</p></td></tr></table>
    <div class="para">DocBook writes its paragraphs as div elements of the class para, as here.</div>
    <p>An unclosed paragraph of the page ends where the next one begins in the text.
    <p>x = 1; y = [2, 3]; z = f(x, y) + g(0x1f, "s") / 4.5e-3 if a else b</p>
    <p>Too short to be prose.</p>
    <footer><p>Copyright 2022, the authors of this manual and of the code in it.</p></footer>
    </body></html>"""
    title, paragraphs = read_html("page.html", page)
    assert title == "Joins & keys"
    assert paragraphs == ["A join combines the rows of two tables by a key that both of them share.",
                          "DocBook writes its paragraphs as div elements of the class para, as here.",
                          "An unclosed paragraph of the page ends where the next one begins in the text."]


@pytest.mark.parametrize("paragraph, prose", [
    ("The function returns the number of rows that the query matched.", True),
    ("Returns the number of rows matched.", False),  # fewer than 8 words
    ("np.array([1, 2, 3]).reshape(3, 1) @ np.ones((1, 3)) == M.T", False),  # code
    ("/usr/share/doc/a /usr/share/doc/b /usr/share/doc/c /usr/share/doc/d and so on", False),  # paths
    ("Die Funktion gibt die Anzahl der Zeilen zurück, die gefunden wurden.", False),  # no English function word
])
def test_a_paragraph_of_a_manual_is_kept_when_it_reads_as_english_prose(paragraph, prose):
    assert is_prose(paragraph) is prose


def test_gutenberg_drops_headings_and_verse_numbers_and_reads_latin1():
    text = ("[Emma by Jane Austen 1816]\n\nVOLUME I\n\nCHAPTER I\n\n\nEmma Woodhouse, handsome, clever, and rich,\n"
            "with a comfortable home.\n\nThe Second Book of Moses\n\n1:2 And the earth was without form,\nand void.\n\n"
            "\"Yes,\" said she.\n\nC\xe6sar, my Lord.\n").encode("latin-1")
    title, paragraphs = read_gutenberg("emma.txt", text)
    assert title == "Emma by Jane Austen 1816"
    assert paragraphs == ["Emma Woodhouse, handsome, clever, and rich, with a comfortable home.",
                          "And the earth was without form, and void.", '"Yes," said she.', "Cæsar, my Lord."]


def test_brown_loses_its_tags_and_gets_its_punctuation_back():
    text = (b"\n\n\tThe/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' was/bedz found/vbn ./.\n\n\n"
            b"\tIt/pps ,/, too/rb (/( mostly/rb )/) ended/vbd ;/. well/rb !/.\n")
    assert read_brown("package/ca01", text) == ("Brown corpus ca01", [
        'The jury said "no evidence" was found.', "It, too (mostly) ended; well!"])


def test_parts_cut_long_texts_between_paragraphs():
    paragraphs = ["one two three", "four five", "six seven eight nine", "ten"]
    assert parts(paragraphs, words=5) == [["one two three", "four five"], ["six seven eight nine", "ten"]]
    assert parts(["a b c d e f g"], words=5) == [["a b c d e f g"]]  # a longer paragraph is a part alone
    assert parts([]) == []


def test_the_held_out_split_takes_one_document_in_ten_of_each_source():
    docs = [Document(f"{source}:{i}", "", source, ["a.", "b."]) for source, n in (("big", 95), ("small", 7))
            for i in range(n)]
    chosen = held_out_ids(docs)
    assert sum(i.startswith("big:") for i in chosen) == 10 and sum(i.startswith("small:") for i in chosen) == 1
    assert held_out_ids(list(reversed(docs))) == chosen  # the order of the documents does not matter


# ---- packages made here -------------------------------------------------------------------------------------------

def _tar(files: dict[str, bytes], mode: str) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _deb(files: dict[str, bytes]) -> bytes:
    """A Debian package as dpkg-deb writes one: an ar archive of debian-binary, control.tar.xz and data.tar.xz."""
    members = {"debian-binary": b"2.0\n", "control.tar.xz": _tar({"./control": b"Package: x\n"}, "w:xz"),
               "data.tar.xz": _tar({f"./{k}": v for k, v in files.items()}, "w:xz")}
    out = b"!<arch>\n"
    for name, data in members.items():
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode() + data + b"\n" * (len(data) % 2)
    return out


PAGE = (b"<html><head><title>Manual</title></head><body><p>The manual explains how the program reads its "
        b"settings from a file.</p><p>Each setting is a name and a value, written on a line of its own.</p>"
        b"<p>A line that starts with a hash is a comment, and the program ignores it.</p></body></html>")
BOOK = (b"[A Book]\n\nCHAPTER I\n\nIt was a bright cold day in April, and the clocks were striking. The wind was "
        b"cold.\n\nShe walked home. The street was empty.\n\nThe manual explains how the program reads its "
        b"settings from a file.\n")


def _sources(raw: Path, page: bytes = PAGE) -> tuple[Source, Source]:
    """A Debian package of two HTML pages (and a picture) and an npm package of one book, written into
    raw/packages/; their Sources record the digests of the pages as made with `page` = PAGE."""
    (raw / "packages").mkdir(parents=True, exist_ok=True)
    other = PAGE.replace(b"hash", b"semicolon").replace(b"Each setting", b"Every option")  # its first paragraph repeats
    pages = {"usr/share/doc/x/html/a.html": PAGE, "usr/share/doc/x/html/b.html": other}
    files = {**pages, "usr/share/doc/x/html/a.html": page, "usr/share/doc/x/html/logo.png": b"\x89PNG"}
    (raw / "packages" / "x-doc_1.0_all.deb").write_bytes(_deb(files))
    (raw / "packages" / "books-1.0.0.tgz").write_bytes(_tar({"package/gutenberg/book.txt": BOOK}, "w:gz"))
    deb = Source("x-doc", "debian", "x-doc", "1.0", "x-doc_1.0_all.deb", "0" * 64, "html", r"\.html$",
                 files_digest(pages), 2, "GPL-2+", "a manual")
    npm = Source("books", "npm", "books", "1.0.0", "books-1.0.0.tgz", "0" * 64, "gutenberg",
                 r"^package/gutenberg/.*\.txt$", files_digest({"package/gutenberg/book.txt": BOOK}), 1,
                 "public domain", "a book")
    return deb, npm


WIKI = (b'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/"><page><title>Albert</title><ns>0</ns><id>7</id>'
        b"<revision><text>'''Albert''' is a model. It shares its layers.\n\nIt was made in 2019. It is small."
        b"</text></revision></page></mediawiki>")


@pytest.fixture
def small_world(tmp_path, monkeypatch):
    """A data directory whose sources are the two packages above and a one-article Wikipedia and two-line news."""
    raw = tmp_path / "raw"
    deb, npm = _sources(raw)
    (raw / "wiki.xml.bz2").write_bytes(bz2.compress(WIKI))
    (raw / "lee.cor").write_text("A storm hit the coast today. Houses were damaged.\nMarkets fell. Traders sold.\n")
    monkeypatch.setattr(sources, "fetch_sources", lambda raw_dir: {"enwiki": raw / "wiki.xml.bz2", "lee": raw / "lee.cor"})
    monkeypatch.setattr(sources, "SOURCES", (deb, npm))
    return tmp_path


def test_prepare_large_makes_documents_drops_repeats_and_holds_out_by_source(small_world):
    stats = prepare_large(small_world, workers=1)
    docs = [json.loads(line) for split in ("train", "validation")
            for line in (small_world / "prepared" / f"{split}.jsonl").read_text().splitlines()]
    assert sorted(d["id"] for d in docs) == ["books:package/gutenberg/book.txt#0", "enwiki:7", "lee:0", "lee:1",
                                             "x-doc:usr/share/doc/x/html/a.html#0", "x-doc:usr/share/doc/x/html/b.html#0"]
    book = next(d for d in docs if d["source"] == "books")
    # the book's last paragraph repeats the manual's first one, which came first (sources are read in order)
    assert book["sentences"] == ["It was a bright cold day in April, and the clocks were striking.", "The wind was cold.",
                                 "She walked home.", "The street was empty."]
    # and so does the second page's first paragraph
    assert stats["skipped"]["paragraph seen before (boilerplate or a second copy of a page)"] == 2
    # running text: documents of three paragraphs or more (the first page, 12 + 15 + 15 words)
    assert stats["sources"]["books"] == {"documents": 1, "words": 17 + 7, "running_words": 0}
    assert stats["sources"]["x-doc"] == {"documents": 2, "words": 12 + 15 + 15 + 15 + 15, "running_words": 42}
    assert stats["validation"]["documents"] == 4  # one of each of the four sources
    assert prepare_large(small_world, workers=1) == stats  # up to date: nothing done


def test_an_interrupted_preparation_is_not_taken_for_a_finished_one(small_world, monkeypatch):
    prepare_large(small_world, workers=1)
    (small_world / "prepared" / "train.jsonl").write_text("left from before\n")
    real = sources.write_atomically

    def interrupt(path, data):
        if path.name == "validation.jsonl":
            raise KeyboardInterrupt
        real(path, data)

    monkeypatch.setattr(sources, "LARGE_RECIPE", sources.LARGE_RECIPE + 1)  # the recipe changed: prepare again
    monkeypatch.setattr(sources, "write_atomically", interrupt)
    with pytest.raises(KeyboardInterrupt):
        prepare_large(small_world, workers=1)
    assert not (small_world / "prepared" / "stats.json").exists()
    assert not list((small_world / "prepared").glob("*.tmp"))
    monkeypatch.setattr(sources, "write_atomically", real)
    assert prepare_large(small_world, workers=1)["recipe"] == sources.LARGE_RECIPE
    assert "left from before" not in (small_world / "prepared" / "train.jsonl").read_text()


def test_a_changed_package_is_an_error_naming_the_source(small_world):
    _sources(small_world / "raw", page=PAGE.replace(b"reads", b"parses"))  # a page of the package was edited
    with pytest.raises(CorpusError, match=r"^source x-doc: the 2 files of x-doc_1.0_all.deb that the corpus uses "
                                          r"have digest [0-9a-f]{64}; expected [0-9a-f]{64} \(2 files of x-doc 1.0\)\. "
                                          r"The package has changed since this recipe was written"):
        prepare_large(small_world, workers=1)
    assert not (small_world / "prepared").exists()


@pytest.mark.parametrize("damage", ["cut", "not a package"])
def test_a_damaged_package_is_an_error_naming_the_file(small_world, damage):
    deb = sources.SOURCES[0]
    path = small_world / "raw" / "packages" / deb.filename
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2] if damage == "cut" else b"<html>404</html>")
    with pytest.raises(CorpusError, match=rf"^source x-doc: {re.escape(str(path))} is (not a readable debian "
                                          rf"package|damaged) .*delete it and run again"):
        prepare_large(small_world, workers=1)
    assert not (small_world / "prepared").exists()


def test_a_missing_package_without_its_client_says_how_to_fetch_it_by_hand(small_world, monkeypatch):
    deb = sources.SOURCES[0]
    (small_world / "raw" / "packages" / deb.filename).unlink()
    monkeypatch.setenv("PATH", str(small_world))  # no apt-get here
    with pytest.raises(CorpusError, match=rf"^source x-doc: `apt-get` is not installed; on a machine without that "
                                          rf"client, fetch debian package x-doc 1.0 and place it as "
                                          rf"{re.escape(str(small_world / 'raw' / 'packages' / deb.filename))}"):
        prepare_large(small_world, workers=1)
    assert not list((small_world / "raw" / "packages").glob("tmp*"))  # the download folder is gone


def test_the_large_corpus_refuses_extra_files():
    from albert_edu.tools.cli import main

    assert main(["prepare-data", "--corpus", "large", "--extra", "notes.txt"]) == 1


# ---- the book's large corpus (prepared by make) ---------------------------------------------------------------------

def test_every_source_is_pinned_and_listed_in_the_readme_with_its_licence_and_checksum():
    readme = (ROOT / "data" / "README.md").read_text()
    for source in SOURCES:
        assert re.fullmatch("[0-9a-f]{64}", source.sha256) and re.fullmatch("[0-9a-f]{64}", source.digest)
        assert f"| {source.name} | {source.registry} `{source.package}` {source.version} |" in readme
        assert source.licence in readme and source.sha256[:12] in readme


def test_readme_statistics_match_the_prepared_large_corpus():
    stats = json.loads((LARGE_DIR / "prepared" / "stats.json").read_text())
    readme = (ROOT / "data" / "README.md").read_text()
    for name, s in stats["sources"].items():
        assert re.search(rf"\| {re.escape(name)} \|[^\n]*\| {s['documents']:,} \| {s['words']:,} \|", readme), name
    for split in ("train", "validation"):
        s = stats[split]
        assert f"| {split} | {s['documents']:,} | {s['sentences']:,} | {s['words']:,} |" in readme
    words = sum(s["words"] for s in stats["sources"].values())
    running = sum(s["running_words"] for s in stats["sources"].values())
    assert words >= 10_000_000 and running >= 0.7 * words  # the targets: ten million words, 70% running text
    assert stats["validation"]["documents"] >= 1000


def test_the_probe_sentences_each_mask_one_piece_of_the_large_tokenizer():
    """The fill-mask probes for the large corpus's model (data/probes-large.json), fixed before it was trained: at
    least 30, each with one [MASK] and an answer that is one piece, so that one masked position can name it."""
    from albert_edu.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(LARGE_DIR / "tokenizer")
    probes = json.loads((ROOT / "data" / "probes-large.json").read_text())["probes"]
    assert len(probes) >= 30 and len({p["text"] for p in probes}) == len(probes)
    for probe in probes:
        assert tokenizer.encode(probe["text"]).count(tokenizer.mask_id) == 1, probe
        assert len(tokenizer.encode(" " + probe["answer"])) == 1, probe
