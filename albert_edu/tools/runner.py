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


def execute(book: Book, chapter: Chapter, source: Path, workdir: Path, out: Path, failed: Path) -> float:
    """Run a chapter (the notebook at `source`) top to bottom in a fresh kernel working in `workdir` and write it to
    `out`. On failure the partial notebook goes to `failed` and the source is left alone."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    os.environ.update(kernel_env(book))
    nb = nbformat.read(source, as_version=4)
    client = NotebookClient(nb, timeout=book.cell_timeout_s, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(workdir)}})
    start = time.perf_counter()
    try:
        client.execute()
    except (CellExecutionError, TimeoutError, RuntimeError) as error:  # a failing cell, a timeout, a dead kernel
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


def run(book: Book, chapters: list[Chapter], out_dir: Path | None = None, workers: int = 1) -> dict[str, float]:
    """Execute chapters (in place unless out_dir is given) and report their times against the budget, `workers`
    chapters at a time (each in its own kernel, with the book's threads: outputs do not depend on it). The library
    must be in step with the chapters first: the chapters import it. A failing chapter fails the run after the
    chapters already started have finished."""
    problems = check(book)
    if problems:
        raise BookError("albert_edu/ is out of step with the chapters; run `albert-edu book export` "
                        "first:\n" + "\n".join(problems))
    if workers < 1:
        raise BookError(f"workers={workers}: expected at least 1")
    started, times, failures = time.perf_counter(), {}, []
    at_a_time = f", {workers} at a time" if workers > 1 and len(chapters) > 1 else ""

    def report(chapter: Chapter, seconds: float) -> None:
        times[chapter.file] = seconds
        over = "  OVER BUDGET" if seconds > book.chapter_budget_s else ""
        print(f"ran {chapter.file} in {seconds:.1f} s{at_a_time} (budget {book.chapter_budget_s} s){over}", flush=True)

    # (the chapters' folder and the build folder are read here: a worker process imports this module anew)
    jobs = {chapter: (book, chapter, chapter.path, CHAPTERS, chapter.path if out_dir is None else out_dir / chapter.file,
                      BUILD / "failed" / chapter.file) for chapter in chapters}
    if workers == 1 or len(jobs) == 1:
        for chapter, job in jobs.items():
            report(chapter, execute(*job))
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed
        from multiprocessing import get_context

        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            futures = {pool.submit(execute, *job): chapter for chapter, job in jobs.items()}
            for future in as_completed(futures):
                try:
                    report(futures[future], future.result())
                except BookError as error:
                    failures.append(str(error))
        if failures:
            raise BookError("\n".join(failures))
    if len(times) > 1:
        wall = time.perf_counter() - started
        print(f"ran {len(times)} chapters in {wall:.1f} s{at_a_time} (budget {book.book_budget_s} s)", flush=True)
    return times
