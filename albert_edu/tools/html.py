"""The HTML book: Sphinx + MyST-NB + sphinx-book-theme, configured from book.toml. Each chapter page gets a
box saying how to run it, a note under every interactive explorer, and its exercises' solutions and its check,
library and plumbing cells folded away."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

from albert_edu.tools.export import GENERATED_MARK
from albert_edu.tools.manifest import BUILD, Book, BookError, Chapter
from albert_edu.tools.runner import run


def sphinx_conf(book: Book) -> str:
    return "\n".join([
        f"# {GENERATED_MARK.lstrip('# ')} from book.toml.",
        f"project = {book.title!r}",
        f"author = {', '.join(book.authors)!r}",
        f"copyright = {book.copyright!r}",
        'extensions = ["myst_nb", "sphinx-mathjax-offline"]',
        'nb_execution_mode = "off"  # the chapters were executed by the book tool just before',
        'myst_enable_extensions = ["dollarmath", "amsmath"]',
        'html_theme = "sphinx_book_theme"',
        f"html_title = {book.title!r}",
        'html_theme_options = {"show_toc_level": 2, "use_download_button": True}',
        'exclude_patterns = ["**.ipynb_checkpoints"]',
        'html_static_path = ["_static"]',
        'html_css_files = ["book.css"]',
        "",
    ])


BOOK_CSS = """/* Code is written up to 120 characters wide: a slightly smaller font fits more of it on screen. */
.bd-page-width { max-width: 100rem; }
.bd-article-container { max-width: 72rem; }
div.cell div.highlight pre, div.cell_output pre { font-size: 0.8rem; }
"""


def index_page(book: Book) -> str:
    lines = [f"# {book.title}", "", book.subtitle, "", "By " + ", ".join(book.authors) + ".", "",
             "```{toctree}", ":caption: Chapters", ":maxdepth: 1", ""]
    lines += [chapter.stem for chapter in book.chapters]
    return "\n".join(lines + ["```", ""])


WIDGET = "application/vnd.jupyter.widget-view+json"


def _markdown_cell(text: str, cell_id: str) -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": text}


def _fold_solution(cell: dict) -> dict:
    """A reference solution (an nbgrader solution cell), or a test cell that holds hidden tests (they check the
    answer, so they tell it), folded away until the reader opens it: a solution's code cell gets MyST-NB's
    hide-cell tag (what it prints is part of the answer), a test cell hide-input, a written answer a <details>
    element."""
    grading = cell.get("metadata", {}).get("nbgrader", {})
    hidden_tests = grading.get("grade") and "### BEGIN HIDDEN TESTS" in "".join(cell.get("source", ""))
    if not grading.get("solution") and not hidden_tests:  # a test cell with hidden tests would give the answer away
        return cell
    cell = json.loads(json.dumps(cell))
    if cell["cell_type"] == "code":  # a solution's printed results are the answer too: the whole cell folds
        tags = cell["metadata"].setdefault("tags", [])
        fold = "hide-cell" if grading.get("solution") else "hide-input"
        if fold not in tags:
            tags.append(fold)
    else:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        cell["source"] = f"<details>\n<summary>A model answer (try the exercise first)</summary>\n\n{source}\n\n</details>"
    return cell


FOLDED = ("check", "library", "plumbing")  # tags of cells folded in JupyterLab (jupyter.source_hidden) and on the page


def _fold_tagged(cell: dict) -> dict:
    """A check cell (tag `check`: asserts that the claims around it still hold), a library cell (tag `library`:
    exported plumbing that the prose names but the lesson does not need) or a plumbing cell (tag `plumbing`: the
    chapter's own loading and bookkeeping, whose results the prose reads), folded in JupyterLab by
    `jupyter.source_hidden`, is folded on the page too: MyST-NB's hide-input tag (what it prints stays in view)."""
    tags = cell.get("metadata", {}).get("tags", [])
    if cell["cell_type"] != "code" or not any(tag in FOLDED for tag in tags):
        return cell
    cell = json.loads(json.dumps(cell))
    cell["metadata"]["tags"].append("hide-input")
    return cell


def decorate_for_html(path: Path, chapter: Chapter) -> None:
    """Add what a reader of the HTML page needs and a notebook reader does not: below the title, how to run the
    chapter and a link to download its notebook; after every interactive explorer (an ipywidgets output, which
    a static page cannot run), a note to run it live; every exercise's reference solution and every cell tagged
    in FOLDED folded away."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    number = chapter.file.split("_", 1)[0]
    hint = (f"```{{admonition}} Run this chapter\n:class: tip\n"
            f"Open `chapters/{chapter.file}` in JupyterLab (`make lab`) and run all cells, or re-execute it in "
            f"place with `make run CHAPTER={number}`. Download the notebook: "
            f"{{download}}`{chapter.file} <{chapter.file}>`.\n```")
    cells = []
    for i, cell in enumerate(nb["cells"]):
        cells.append(_fold_tagged(_fold_solution(cell)))
        if i == 0:
            cells.append(_markdown_cell(hint, "run-this-chapter"))
        if any(WIDGET in output.get("data", {}) for output in cell.get("outputs", [])):
            cells.append(_markdown_cell("```{note}\nThis explorer is interactive: its controls work only in a running "
                                        "notebook. Open the chapter in JupyterLab to use it.\n```", f"explorer-note-{i}"))
    nb["cells"] = cells
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def build_html(book: Book, execute_chapters: bool = True, workers: int = 2) -> Path:
    src, html = BUILD / "src", BUILD / "html"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    if execute_chapters:
        run(book, list(book.chapters), out_dir=src, workers=workers)
    else:
        for chapter in book.chapters:
            shutil.copy(chapter.path, src / chapter.file)
    for chapter in book.chapters:
        decorate_for_html(src / chapter.file, chapter)
    (src / "index.md").write_text(index_page(book), encoding="utf-8")
    (src / "conf.py").write_text(sphinx_conf(book), encoding="utf-8")
    (src / "_static").mkdir()
    (src / "_static" / "book.css").write_text(BOOK_CSS, encoding="utf-8")
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going",
               "-d", str(BUILD / "doctrees"), str(src), str(html)]
    if subprocess.run(command).returncode != 0:
        raise BookError("sphinx could not render the book (messages above)")
    return html / "index.html"
