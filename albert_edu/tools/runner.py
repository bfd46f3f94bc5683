"""Running chapters: each one top to bottom in a fresh kernel with the book's environment, its outputs stored
in place (or into a build directory), its time reported against book.toml's budget."""

import os
import time
from pathlib import Path

from albert_edu.tools.export import check
from albert_edu.tools.manifest import BUILD, CHAPTERS, Book, BookError, Chapter, kernel_env


def normalize(nb) -> None:
    """Drop metadata that changes from run to run, so a re-run with equal outputs leaves no diff."""
    nb.metadata.pop("widgets", None)
    nb.metadata.pop("papermill", None)
    nb.metadata.get("language_info", {}).pop("version", None)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    for cell in nb.cells:
        cell.metadata.pop("execution", None)


def execute(book: Book, chapter: Chapter, out: Path) -> float:
    """Run a chapter top to bottom in a fresh kernel (working directory chapters/) and write it to `out`.
    On failure the partial notebook goes to _build/failed/ and the committed chapter is left alone."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    os.environ.update(kernel_env(book))
    nb = nbformat.read(chapter.path, as_version=4)
    client = NotebookClient(nb, timeout=book.cell_timeout_s, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(CHAPTERS)}})
    start = time.perf_counter()
    try:
        client.execute()
    except (CellExecutionError, TimeoutError, RuntimeError) as error:  # a failing cell, a timeout, a dead kernel
        failed = BUILD / "failed" / chapter.file
        failed.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, failed)
        raise BookError(f"{chapter.file} failed; the partial run is in {failed}\n{error}") from None
    seconds = time.perf_counter() - start
    normalize(nb)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    nbformat.write(nb, tmp)
    tmp.replace(out)
    return seconds


def run(book: Book, chapters: list[Chapter], out_dir: Path | None = None) -> dict[str, float]:
    """Execute chapters (in place unless out_dir is given) and report their times against the budget.
    The library must be in step with the chapters first: the chapters import it."""
    problems = check(book)
    if problems:
        raise BookError("albert_edu/ is out of step with the chapters; run `albert-edu book export` "
                        "first:\n" + "\n".join(problems))
    times = {}
    for chapter in chapters:
        out = chapter.path if out_dir is None else out_dir / chapter.file
        times[chapter.file] = seconds = execute(book, chapter, out)
        over = "  OVER BUDGET" if seconds > book.chapter_budget_s else ""
        print(f"ran {chapter.file} in {seconds:.1f} s (budget {book.chapter_budget_s} s){over}", flush=True)
    total = sum(times.values())
    if len(times) > 1:
        print(f"ran {len(times)} chapters in {total:.1f} s (budget {book.book_budget_s} s)", flush=True)
    return times
