"""Set-up shared by every chapter: seeds, threads, print precision and the book's one figure style.

Each chapter starts with `setup_notebook()`, so a chapter prints the same numbers and draws the same
figures on any machine. (The runner and nbval also set environment variables such as PYTHONHASHSEED before
the kernel starts, which no code inside a running kernel can do; see albert_edu.tools.manifest.kernel_env.)
The seed and the number of threads come from book.toml's [test] table, which the toolbox also reads; this
module reads the two numbers itself, because the chapters' modules never import the toolbox.
"""

import random
import re
import statistics
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import numpy as np

BOOK_TOML = Path(__file__).resolve().parent.parent / "book.toml"

# One palette for the whole book: a component keeps its colour from figure to figure.
COLORS = {
    "embeddings": "#4C72B0",
    "projection": "#DD8452",
    "attention": "#55A868",
    "ffn": "#C44E52",
    "pooler": "#8172B3",
    "BERT": "#937860",
    "ALBERT": "#DA8BC3",
}

FIGURE_STYLE = {
    "figure.figsize": (7.0, 3.6),
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.frameon": False,
}


def setup_notebook(seed: int | None = None) -> int:
    """Fix seeds, threads, print precision and figure style; return the seed used (book.toml's by default)."""
    with open(BOOK_TOML, "rb") as f:
        settings = tomllib.load(f)["test"]
    seed = settings["seed"] if seed is None else seed
    random.seed(seed)
    np.random.seed(seed)
    np.set_printoptions(precision=4, suppress=True)
    import torch  # imported here so that merely importing this module stays fast

    torch.manual_seed(seed)
    torch.set_num_threads(settings["threads"])
    torch.set_printoptions(precision=4, sci_mode=False)
    import matplotlib.pyplot as plt  # loads the inline backend first, so our style is not overridden

    plt.rcParams.update(FIGURE_STYLE)
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is not None:
        shell.run_line_magic("config", "InlineBackend.figure_formats = ['png']")
    return seed


_NUMBER = re.compile(r"^[-+]?[\d.,]+(e[-+]?\d+)?\s?[%A-Za-z]{0,3}$")  # 12, 1,024, 3.5M, 45%, 2 MiB


def print_table(headers: list[str], rows: list[list]) -> None:
    """Print an aligned plain-text table: text, unlike rich output, is what nbval compares."""
    table = [[str(h) for h in headers]] + [[str(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    numeric = [all(_NUMBER.match(row[i]) for row in table[1:]) for i in range(len(headers))]
    for n, row in enumerate(table):
        cells = [v.rjust(w) if right else v.ljust(w) for v, w, right in zip(row, widths, numeric)]
        print("  ".join(cells).rstrip())
        if n == 0:
            print("  ".join("-" * width for width in widths))



def time_rounds(functions: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """The seconds of every call, round by round: each function runs once to warm up, then all of them in turn,
    `rounds` times, so that a slow spell of a shared machine longer than a round falls on every function, and a
    shorter one spoils one function's round, which a median sets aside."""
    for function in functions.values():
        function()
    times = {name: [] for name in functions}
    for _ in range(rounds):
        for name, function in functions.items():
            start = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - start)
    return times


def time_interleaved(functions: dict[str, Callable[[], object]], repeats: int = 10) -> dict[str, float]:
    """Median seconds per call of each function (time_rounds); compare the results as ratios."""
    return {name: statistics.median(t) for name, t in time_rounds(functions, repeats).items()}
