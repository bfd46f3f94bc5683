"""Chapter 8's bookkeeping for reading stored pair-task answers, the plumbing its tables call: a recipe's seeds'
balanced accuracy under every draw of the held-out documents, MLM accuracy from the per-document counts, table
cells that say when a head answers one way ("constant"), the paired comparisons of Table 5's claims with their
Holm-adjusted p-values, and the verdict table. The statistics themselves are albert_edu.stats (Appendix A).

A run here is a results-file entry: a dict whose "predictions" hold, per task, its answer to every held-out pair
(a string of 0s and 1s) and "mlm_by_document", its masked pieces per document. The held-out pairs are passed as
`scored`, (labels, weights) per task: the labels as arrays of 0/1 and the weights as bootstrap_weights' draws."""

import numpy as np

from albert_edu.notebook import print_table
from albert_edu.stats import bits, bootstrap_weights, clustered_mcnemar, holm, interval, weighted_balanced_accuracy

CONSTANT = 0.99  # a head that gives one answer to this share of the pairs or more, in every seed, is a constant


def share_of_ones(runs: list[dict], task: str) -> np.ndarray:
    """Per pair, the share of the runs (seeds) that answered 1."""
    return np.mean([bits(r["predictions"][task]) for r in runs], axis=0)


def balanced(runs: list[dict], task: str, scored: tuple, subset=slice(None)) -> np.ndarray:
    """The seeds' mean balanced accuracy on a task (restricted to a subset of the pairs) under every draw of the
    documents; `scored` is (labels, weights) per task."""
    labels, weights = scored
    return weighted_balanced_accuracy(share_of_ones(runs, task)[subset], labels[task][subset], weights[task][:, subset])


def mlm_per_piece(runs: list[dict], key: str = "right") -> np.ndarray:
    """The mean over all seeds' masked pieces of `key` ("right": MLM accuracy; "loss": MLM cross-entropy), under
    every draw of the documents."""
    per_document = [r["predictions"]["mlm_by_document"] for r in runs]
    draws = bootstrap_weights(per_document[0]["documents"])
    total = sum(np.array(d[key]) for d in per_document)
    count = sum(np.array(d["count"]) for d in per_document)
    return (draws * total).sum(1) / (draws * count).sum(1)


def mlm_accuracy(runs: list[dict]) -> np.ndarray:
    return mlm_per_piece(runs, "right")


def cell(replicates: np.ndarray) -> str:
    """A table cell: the estimate and its 95% interval, in percent."""
    low, high = interval(replicates)
    return f"{100 * replicates[0]:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def one_answer(runs: list[dict], task: str, subset=slice(None)) -> float:
    """The share of the pairs given the commoner answer, in the seed that varies its answers most."""
    return min(max(share := bits(r["predictions"][task])[subset].mean(), 1 - share) for r in runs)


def shown(replicates: np.ndarray, runs: list[dict] | None = None, column: str = "", subset=slice(None)) -> str:
    """A table cell: the seed mean and its interval, or, for a pair head that answers one way, 'constant': its
    50% is chance by construction, and its interval (zero width) measures nothing."""
    task = column[:3].lower()
    if runs and task in ("nsp", "sop") and one_answer(runs, task, subset) >= CONSTANT:
        return f"{100 * replicates[0]:.1f}, constant"
    return cell(replicates)


def right_share(runs: list[dict], task: str, task_labels: np.ndarray) -> np.ndarray:
    """Per pair, the share of the runs (seeds) that answered it right."""
    return np.mean([bits(r["predictions"][task]) == task_labels for r in runs], axis=0)


def paired(a_runs: list[dict], b_runs: list[dict], task: str, on: dict, keep=slice(None)):
    """A's balanced accuracy minus B's under every draw, and the clustered McNemar p-value (weighted by label, so
    that a label preference is no skill), on the pairs `keep` of the held-out pairs `on` (labels, weights and
    documents per task). No p-value (None) when both heads are constants: they differ by nothing but which
    answer they give, and there is nothing to test."""
    scored, task_labels = (on["labels"], on["weights"]), on["labels"][task]
    difference = balanced(a_runs, task, scored, keep) - balanced(b_runs, task, scored, keep)  # the same draws
    if min(one_answer(a_runs, task, keep), one_answer(b_runs, task, keep)) >= CONSTANT:
        return difference, None
    _, p = clustered_mcnemar(right_share(a_runs, task, task_labels)[keep], right_share(b_runs, task, task_labels)[keep],
                             on["documents"][task][keep], task_labels[keep])
    return difference, p


def report(tests: dict, titles: dict, primary: list) -> dict:
    """Print each test with its p-value adjusted by Holm within its family (the primary comparisons, and the
    others); return the tests with the adjusted p-values (None where there was nothing to test)."""
    families = [[key for key in tests if (key in primary) == first and tests[key][1] is not None] for first in (True, False)]
    adjusted = {key: p for family in families for key, p in holm({k: tests[k][1] for k in family}).items()}
    print("95% intervals, not adjusted; p-values Holm-adjusted within their family")
    for key, (difference, p) in tests.items():
        low, high = interval(difference)
        test = "both heads constant: nothing to test" if p is None else \
            f"clustered McNemar p = {p:.2g}, Holm-adjusted {adjusted[key]:.2g}"
        print(f"{'primary' if key in primary else 'check  '}  {titles[key]}: {100 * difference[0]:+.1f} points "
              f"[{100 * low:+.1f}, {100 * high:+.1f}], {test}")
    return {key: (difference, adjusted.get(key)) for key, (difference, _) in tests.items()}


def lower(replicates: np.ndarray) -> float:
    return interval(replicates)[0]


def established(difference: np.ndarray, p: float | None) -> bool:
    """A paired difference whose 95% interval excludes 0 and whose clustered McNemar p-value, adjusted for the
    tests made with it, is below 0.05 (chapter 8, section 8.3)."""
    return lower(difference) > 0 and p is not None and p < 0.05


def contains_chance(replicates: np.ndarray) -> bool:
    """The 95% interval of a balanced accuracy contains 50%."""
    low, high = interval(replicates)
    return low <= 0.5 <= high


def pct(replicates: np.ndarray) -> str:
    return f"{100 * replicates[0]:.1f}"


def verdicts(title: str, rows: list) -> None:
    """Table 5's claims, the paper's numbers and ours, and whether each claim holds here (True or False), or a
    string saying why it cannot be read."""
    print(title)
    print_table(["claim", "the paper (plain accuracy)", "ours (balanced)", "holds here"],
                [[c, p, o, h if isinstance(h, str) else "yes" if h else "no"] for c, p, o, h in rows])  # or why not read
