"""The book tool: the manifest matches the chapters, the library matches a fresh export, and every
chapter is stored as one fresh top-to-bottom run (nbval compares nothing in cells that were never run)."""

import ast
import json
import shutil
import subprocess
import sys

import pytest

from albert_edu.tools import export as exporter
from albert_edu.tools import html as htmltool
from albert_edu.tools import manifest
from albert_edu.tools.export import split_directives
from albert_edu.tools.manifest import BookError, load_book

BOOK = load_book()


def test_every_notebook_in_chapters_is_listed_in_book_toml():
    on_disk = {p.name for p in manifest.CHAPTERS.glob("*.ipynb")}
    assert on_disk == {c.file for c in BOOK.chapters}


def test_every_listed_chapter_exists():
    missing = [c.file for c in BOOK.chapters if not c.path.exists()]
    assert missing == []


def test_chapters_are_numbered_in_reading_order():
    numbers = [int(c.file[:2]) for c in BOOK.chapters]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)


def test_albert_edu_is_in_step_with_the_chapters():
    result = subprocess.run([sys.executable, "-m", "albert_edu", "book", "check"], capture_output=True, text=True)
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
            first = (manifest.PACKAGE / f"{module}.py").read_text().splitlines()[0]
            assert first.startswith(exporter.GENERATED_MARK) and chapter.file in first


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
    assert exporter.public_names(code, "test") == ["a", "D", "f", "K"]


def test_chapters_import_only_modules_that_earlier_chapters_define():
    import albert_edu

    defined, plumbing = set(), {"tools", "notebook", "explorers", "checkpoint", "resume", "sources", "run_cache", "stats",
                                  "finetune_grid", "recipes", "pair_scores", "ablation_grid",
                                  "throughput", "finetune_recipes"}  # hand-written
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


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A copy of chapters/ and albert_edu/ that export and check may change."""
    for folder, pattern in (("chapters", "*.ipynb"), ("albert_edu", "*.py")):
        (tmp_path / folder).mkdir()
        for path in (manifest.ROOT / folder).glob(pattern):
            shutil.copy(path, tmp_path / folder / path.name)
    for module in (manifest, exporter):
        monkeypatch.setattr(module, "ROOT", tmp_path)
        monkeypatch.setattr(module, "PACKAGE", tmp_path / "albert_edu")
    monkeypatch.setattr(manifest, "CHAPTERS", tmp_path / "chapters")
    return tmp_path


def test_check_reports_a_hand_edited_module(sandbox):
    path = sandbox / "albert_edu" / "params.py"
    path.write_text(path.read_text() + "\n# a hand edit\n")
    assert exporter.check(BOOK) == ["albert_edu/params.py differs from its chapter (edited by hand, or the chapter changed)"]
    exporter.export(BOOK)
    assert exporter.check(BOOK) == []


def test_export_refuses_to_overwrite_a_hand_written_module(sandbox):
    (sandbox / "albert_edu" / "params.py").write_text("# written by hand\n")
    with pytest.raises(BookError, match="hand-written albert_edu/params.py"):
        exporter.export(BOOK)


def test_check_reports_a_stale_generated_module(sandbox):
    (sandbox / "albert_edu" / "old.py").write_text(exporter.GENERATED_MARK + " from chapters/99_gone.ipynb\n")
    assert exporter.check(BOOK) == ["albert_edu/old.py was generated but no chapter exports it now"]
    exporter.export(BOOK)
    assert not (sandbox / "albert_edu" / "old.py").exists()


def test_export_refuses_a_module_the_manifest_does_not_list(sandbox):
    path = sandbox / "chapters" / "01_parameter_budget.ipynb"
    nb = json.loads(path.read_text())
    nb["cells"].append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                        "source": ["#| export tokenizer\n", "x = 1\n"]})
    path.write_text(json.dumps(nb))
    with pytest.raises(BookError, match="exports to 'tokenizer'"):
        exporter.export_sources(BOOK)


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


def test_html_pages_get_a_run_hint_a_notebook_link_and_explorer_notes(tmp_path):
    chapter = load_book().chapters[1]
    widget = {"output_type": "display_data", "data": {htmltool.WIDGET: {"model_id": "x"}, "text/plain": ["w"]},
              "metadata": {}}
    cells = [{"cell_type": "markdown", "id": "a", "metadata": {}, "source": "# 1. Title"},
             {"cell_type": "code", "id": "b", "metadata": {}, "source": "explorer()", "execution_count": 1,
              "outputs": [widget]},
             {"cell_type": "code", "id": "c", "metadata": {}, "source": "1", "execution_count": 2, "outputs": []}]
    path = tmp_path / chapter.file
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    htmltool.decorate_for_html(path, chapter)
    out = json.loads(path.read_text())["cells"]
    assert [c["id"] for c in out] == ["a", "run-this-chapter", "b", "explorer-note-1", "c"]
    hint = out[1]["source"]
    assert f"make run CHAPTER={chapter.file[:2]}" in hint and f"{{download}}`{chapter.file} <{chapter.file}>`" in hint
    assert "interactive" in out[3]["source"]


def test_html_pages_fold_solutions_away(tmp_path):
    chapter = load_book().chapters[1]
    solution = {"nbgrader": {"solution": True, "grade": False, "grade_id": "s"}}
    cells = [{"cell_type": "markdown", "id": "a", "metadata": {}, "source": "# 1. Title"},
             {"cell_type": "code", "id": "s", "metadata": solution, "source": "x = 1", "execution_count": 1,
              "outputs": []},
             {"cell_type": "markdown", "id": "w", "metadata": {"nbgrader": {**solution["nbgrader"], "grade": True}},
              "source": ["Because the sum ", "is finite."]},
             {"cell_type": "code", "id": "t", "metadata": {"nbgrader": {"solution": False, "grade": True}},
              "source": "assert x == 1", "execution_count": 2, "outputs": []},
             {"cell_type": "code", "id": "h", "metadata": {"nbgrader": {"solution": False, "grade": True}},
              "source": "assert x\n### BEGIN HIDDEN TESTS\nassert x == 1\n### END HIDDEN TESTS", "execution_count": 3,
              "outputs": []}]
    path = tmp_path / chapter.file
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    htmltool.decorate_for_html(path, chapter)
    out = {c["id"]: c for c in json.loads(path.read_text())["cells"]}
    assert out["s"]["metadata"]["tags"] == ["hide-cell"] and out["s"]["source"] == "x = 1"
    written = out["w"]["source"]
    assert written.startswith("<details>") and "Because the sum is finite." in written and written.endswith("</details>")
    assert "tags" not in out["t"]["metadata"] and out["t"]["source"] == "assert x == 1"  # tests stay in view
    assert out["h"]["metadata"]["tags"] == ["hide-input"]  # unless they hold hidden tests, which tell the answer


def test_html_pages_fold_check_and_library_cells_away(tmp_path):
    chapter = load_book().chapters[1]
    check = {"tags": ["check"], "jupyter": {"source_hidden": True}}
    cells = [{"cell_type": "markdown", "id": "a", "metadata": {}, "source": "# 1. Title"},
             {"cell_type": "code", "id": "k", "metadata": check, "source": "assert 1 + 1 == 2", "execution_count": 1,
              "outputs": []},
             {"cell_type": "code", "id": "l", "metadata": {"tags": ["library"], "jupyter": {"source_hidden": True}},
              "source": "#| export\ndef plumbing():\n    pass", "execution_count": 2, "outputs": []},
             {"cell_type": "code", "id": "v", "metadata": {}, "source": "print(2)", "execution_count": 3, "outputs": []}]
    path = tmp_path / chapter.file
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    htmltool.decorate_for_html(path, chapter)
    out = {c["id"]: c for c in json.loads(path.read_text())["cells"]}
    assert out["k"]["metadata"]["tags"] == ["check", "hide-input"] and out["k"]["source"] == "assert 1 + 1 == 2"
    assert out["l"]["metadata"]["tags"] == ["library", "hide-input"]
    assert "tags" not in out["v"]["metadata"]


def _top_level_names(source, context):
    """The names a cell binds (context ast.Store) or reads (ast.Load) anywhere in it, leaving out the variables a
    comprehension or lambda binds for itself."""
    def walk(node):
        yield node
        if context is ast.Load or not isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                                                        ast.Lambda)):
            for child in ast.iter_child_nodes(node):
                yield from walk(child)
    tree = ast.parse("\n".join(line for line in source.split("\n") if not line.startswith("%")))
    return {n.id for n in walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, context)}


@pytest.mark.parametrize("chapter", BOOK.chapters, ids=lambda c: c.file)
def test_only_check_library_and_plumbing_cells_are_folded_and_they_hide_nothing_the_lesson_needs(chapter):
    """A cell tagged `check` asserts the claims around it; a cell tagged `library` is exported plumbing; a cell
    tagged `plumbing` is the chapter's own loading and bookkeeping. All are folded (JupyterLab's source_hidden; the
    HTML book's hide-input), and nothing else is. Folding must hide nothing a reader needs: a check cell prints
    nothing, asserts something, and no later cell outside the checks reads a name it binds; a library cell is an
    export cell, and a plumbing cell is not (an exported cell is library)."""
    cells = [c for c in _load(chapter)["cells"] if c["cell_type"] == "code"]
    for k, cell in enumerate(cells):
        source = "".join(cell["source"])
        tags = set(cell["metadata"].get("tags", [])) & set(htmltool.FOLDED)
        assert len(tags) <= 1 and bool(tags) == bool(cell["metadata"].get("jupyter", {}).get("source_hidden")), \
            source[:200]
        if tags == {"library"}:
            assert "export" in split_directives(source)[0], f"a library cell that exports nothing: {source[:200]}"
        if tags == {"plumbing"}:
            assert "export" not in split_directives(source)[0], f"an export cell is a library cell: {source[:200]}"
        if tags != {"check"}:
            continue
        assert cell["outputs"] == [] and "assert " in source, source[:200]
        bound = _top_level_names(source, ast.Store)
        later = [c for c in cells[k + 1:] if "check" not in c["metadata"].get("tags", [])]
        read = set().union(*(_top_level_names("".join(c["source"]), ast.Load) for c in later))
        assert not bound & read, f"a check cell binds {sorted(bound & read)}, which later cells read: {source[:200]}"


def test_the_runner_executes_chapters_two_at_a_time_and_reports_a_failing_one_after_the_others(tmp_path, monkeypatch,
                                                                                              capsys):
    from albert_edu.tools import runner

    def notebook(source):
        return {"cells": [{"cell_type": "code", "id": "c", "metadata": {}, "source": source, "outputs": [],
                           "execution_count": None}], "metadata": {"kernelspec": {"name": "python3"}},
                "nbformat": 4, "nbformat_minor": 5}

    folder = tmp_path / "chapters"
    folder.mkdir()
    chapters = [manifest.Chapter(f"{n:02d}_demo.ipynb", "demo", ()) for n in range(3)]
    for chapter, source in zip(chapters, ["print(6 * 7)", "print('second')", "1 / 0"]):
        (folder / chapter.file).write_text(json.dumps(notebook(source)))
    monkeypatch.setattr(manifest, "CHAPTERS", folder)
    monkeypatch.setattr(runner, "CHAPTERS", folder)
    monkeypatch.setattr(runner, "BUILD", tmp_path / "build")
    monkeypatch.setattr(runner, "check", lambda book: [])
    with pytest.raises(BookError, match="02_demo.ipynb failed"):
        runner.run(BOOK, chapters, out_dir=tmp_path / "out", workers=2)
    outputs = {p.name: "".join(json.loads(p.read_text())["cells"][0]["outputs"][0]["text"])
               for p in (tmp_path / "out").iterdir()}
    assert outputs == {"00_demo.ipynb": "42\n", "01_demo.ipynb": "second\n"}
    printed = capsys.readouterr().out
    assert "ran 00_demo.ipynb in" in printed and ", 2 at a time (budget" in printed
    assert (tmp_path / "build" / "failed" / "02_demo.ipynb").is_file()
