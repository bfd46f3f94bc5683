"""The book tool: the manifest matches the chapters, the library matches a fresh export, and every
chapter is stored as one fresh top-to-bottom run (nbval compares nothing in cells that were never run)."""

import ast
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


@pytest.mark.parametrize("source, message", [
    ("#| export two words\nx = 1", "malformed directive"),
    ("# NBVAL_IGNORE_OUTPUT\n#| export\nx = 1", "must be at the top of its cell"),
    ("x = 1\n#| export", "must be at the top of its cell"),
    ("#| export config\n#| export params\nx = 1", "appears twice"),
])
def test_misplaced_repeated_or_malformed_directives_are_errors(source, message):
    with pytest.raises(BookError, match=message):
        split_directives(source)


def test_leading_blank_lines_do_not_hide_a_directive():
    assert split_directives("\n#| export\nx = 1") == ({"export": None}, "x = 1")


def test_public_names_include_tuple_assignments_and_skip_private_ones():
    code = "a, (b, c) = 1, (2, 3)\n_hidden = 4\nD: int = 5\ndef f(): pass\nclass K: pass\n"
    assert booktool.public_names(code, "test") == ["a", "D", "f", "K"]


def test_chapters_import_only_modules_that_earlier_chapters_define():
    import albert_edu

    defined, plumbing = set(), {"book", "notebook"}
    for chapter in BOOK.chapters:
        defined |= set(chapter.modules)
        for cell in _load(chapter)["cells"]:
            if cell["cell_type"] != "code":
                continue
            for node in ast.walk(ast.parse("".join(cell["source"]))):
                if isinstance(node, ast.ImportFrom) and node.module == "albert_edu":
                    used = {albert_edu._HOME.get(alias.name, alias.name) for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("albert_edu."):
                    used = {node.module.split(".")[1]}
                elif isinstance(node, ast.Import):
                    used = {a.name.split(".")[1] for a in node.names if a.name.startswith("albert_edu.")}
                else:
                    continue
                assert used <= defined | plumbing, f"{chapter.file} uses {sorted(used - defined - plumbing)} before they are defined"
