"""The package's two rooms: albert_edu/ holds what the chapters teach, albert_edu/tools/ what builds the book.
The teaching modules never import the toolbox, and the toolbox imports the teaching modules only inside the
functions that need them, so the book tool keeps working while a chapter's exported code is broken."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import albert_edu

PACKAGE = Path(albert_edu.__file__).parent
TEACHING = sorted(p for p in PACKAGE.glob("*.py") if p.name != "__main__.py")  # __main__ only calls tools.cli
TOOLS = sorted((PACKAGE / "tools").glob("*.py"))


def imported_modules(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


@pytest.mark.parametrize("path", TEACHING, ids=lambda p: p.name)
def test_a_teaching_module_never_imports_the_toolbox(path):
    used = imported_modules(ast.parse(path.read_text()))
    assert not {m for m in used if m == "albert_edu.tools" or m.startswith("albert_edu.tools.")}


@pytest.mark.parametrize("path", TOOLS, ids=lambda p: p.name)
def test_the_toolbox_imports_teaching_modules_only_inside_functions(path):
    top_level = [node for node in ast.parse(path.read_text()).body if isinstance(node, (ast.Import, ast.ImportFrom))]
    used = imported_modules(ast.Module(body=top_level, type_ignores=[]))
    teaching = {m for m in used if m.startswith("albert_edu.") and not m.startswith("albert_edu.tools")}
    assert not teaching


def test_the_layout_test_sees_a_violation():
    bad = ast.parse("from albert_edu.tools.manifest import ROOT\n")
    assert "albert_edu.tools.manifest" in imported_modules(bad)


def test_the_data_directory_comes_from_the_library_and_can_be_moved(tmp_path):
    code = "from albert_edu.corpus import DATA_DIR; print(DATA_DIR)"
    default = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert Path(default) == PACKAGE.parent / "data"
    moved = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "ALBERT_EDU_DATA": str(tmp_path)}).stdout.strip()
    assert Path(moved) == tmp_path


def test_the_front_door_offers_exactly_the_names_book_toml_calls_public():
    from albert_edu.tools.manifest import load_book

    listed = [name for chapter in load_book().chapters for name in chapter.public]
    assert sorted(albert_edu.__all__) == sorted(listed)
    assert len(listed) <= 40, "the front door should hold what a reader calls, not every helper"
    for name in listed:
        assert getattr(albert_edu, name) is not None
    with pytest.raises(AttributeError, match="import it from albert_edu.corpus"):
        albert_edu.split_sentences  # a helper stays in its module, and the front door says which
    assert not [name for name in dir(albert_edu) if name.startswith("_")]
    from albert_edu.corpus import split_sentences  # noqa: F401  (and is reached there)


def test_a_public_name_that_no_module_defines_is_refused(monkeypatch):
    import dataclasses

    from albert_edu.tools import export, manifest

    book = manifest.load_book()
    broken = dataclasses.replace(book.chapters[1], public=("AlbertConfig", "NoSuchThing"))
    book = dataclasses.replace(book, chapters=(book.chapters[0], broken, *book.chapters[2:]))
    with pytest.raises(manifest.BookError, match="NoSuchThing"):
        export.export_sources(book)
