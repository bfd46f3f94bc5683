"""The book tool: the manifest matches the chapters, the library matches a fresh export, and every
chapter is stored as one fresh top-to-bottom run (nbval compares nothing in cells that were never run)."""

import json
import shutil
import subprocess
import sys

import pytest

from albert_edu import book as booktool
from albert_edu.book import BookError, load_book, split_directives

BOOK = load_book()


def test_every_notebook_in_chapters_is_listed_in_book_toml():
    on_disk = {p.name for p in booktool.CHAPTERS.glob("*.ipynb")}
    assert on_disk == {c.file for c in BOOK.chapters}


def test_every_listed_chapter_exists():
    missing = [c.file for c in BOOK.chapters if not c.path.exists()]
    assert missing == []


def test_chapters_are_numbered_in_reading_order():
    numbers = [int(c.file[:2]) for c in BOOK.chapters]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)


def test_albert_edu_is_in_step_with_the_chapters():
    result = subprocess.run([sys.executable, "-m", "albert_edu.book", "check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def _load(chapter):
    with open(chapter.path, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("chapter", BOOK.chapters, ids=lambda c: c.file)
def test_chapter_is_stored_as_one_fresh_run(chapter):
    code = [c for c in _load(chapter)["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1))
    assert any(c["outputs"] for c in code), "no outputs stored: nbval would compare nothing"
    errors = [o for c in code for o in c["outputs"] if o["output_type"] == "error"]
    assert errors == []


@pytest.mark.parametrize("chapter", BOOK.chapters, ids=lambda c: c.file)
def test_chapter_starts_with_the_notebook_setup(chapter):
    code = [c for c in _load(chapter)["cells"] if c["cell_type"] == "code"]
    assert "setup_notebook()" in "".join(code[0]["source"])


def test_exported_modules_name_their_chapter():
    for chapter in BOOK.chapters:
        for module in chapter.modules:
            first = (booktool.PACKAGE / f"{module}.py").read_text().splitlines()[0]
            assert first.startswith(booktool.GENERATED_MARK) and chapter.file in first


def test_split_directives_separates_directives_from_code():
    assert split_directives("#| export params\nx = 1\n") == ({"export": "params"}, "x = 1")
    assert split_directives("#| export\n#| hide\ny = 2") == ({"export": None, "hide": None}, "y = 2")
    assert split_directives("x = 1  #| not a directive") == ({}, "x = 1  #| not a directive")


def test_malformed_directive_is_an_error():
    with pytest.raises(BookError, match="malformed directive"):
        split_directives("#| export two words\nx = 1")


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A copy of chapters/ and albert_edu/ that export and check may change."""
    for name in ("chapters", "albert_edu"):
        shutil.copytree(booktool.ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(booktool, "ROOT", tmp_path)
    monkeypatch.setattr(booktool, "CHAPTERS", tmp_path / "chapters")
    monkeypatch.setattr(booktool, "PACKAGE", tmp_path / "albert_edu")
    return tmp_path


def test_check_reports_a_hand_edited_module(sandbox):
    path = sandbox / "albert_edu" / "params.py"
    path.write_text(path.read_text() + "\n# a hand edit\n")
    assert booktool.check(BOOK) == ["albert_edu/params.py differs from its chapter (edited by hand, or the chapter changed)"]
    booktool.export(BOOK)
    assert booktool.check(BOOK) == []


def test_check_reports_a_stale_generated_module(sandbox):
    (sandbox / "albert_edu" / "old.py").write_text(booktool.GENERATED_MARK + " from chapters/99_gone.ipynb\n")
    assert booktool.check(BOOK) == ["albert_edu/old.py was generated but no chapter exports it now"]
    booktool.export(BOOK)
    assert not (sandbox / "albert_edu" / "old.py").exists()


def test_export_refuses_a_module_the_manifest_does_not_list(sandbox):
    path = sandbox / "chapters" / "01_parameter_budget.ipynb"
    nb = json.loads(path.read_text())
    nb["cells"].append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                        "source": ["#| export tokenizer\n", "x = 1\n"]})
    path.write_text(json.dumps(nb))
    with pytest.raises(BookError, match="exports to 'tokenizer'"):
        booktool.export_sources(BOOK)


def test_chapter_lookup_by_number_stem_or_file():
    assert BOOK.chapter("1") == BOOK.chapter("01_parameter_budget") == BOOK.chapter("chapters/01_parameter_budget.ipynb")
    with pytest.raises(BookError, match="no chapter '42'"):
        BOOK.chapter("42")


def test_bad_manifest_names_the_problem(tmp_path):
    bad = tmp_path / "book.toml"
    bad.write_text('title = "t"\nauthors = []\ncopyright = "c"\nchapters = []\n[test]\nseed = 0\n')
    with pytest.raises(BookError, match=r"\[test\] has no 'threads'"):
        load_book(bad)


def test_package_names_load_lazily_and_unknown_names_fail():
    import albert_edu

    assert albert_edu.AlbertConfig.__module__ == "albert_edu.config"
    with pytest.raises(AttributeError, match="no attribute 'AlbertKonfig'"):
        albert_edu.AlbertKonfig
