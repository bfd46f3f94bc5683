"""The book's statistical tools: per-document bootstrap intervals, paired tests counted by documents, Holm's
adjustment, and Welch's t-test for a few seeds a side. Appendix A ("How this book tests a claim") builds each one by
hand and checks it by simulation; chapters 8-11 use them (through albert_edu.experiments, which re-exports these
names). The intervals and the paired tests treat the held-out document as the unit, since a second sample of text
would bring other documents, not other pieces of the same ones; Welch's test treats the training seed as the unit."""

import math

import numpy as np
from scipy.stats import t as student_t


def bits(text: str) -> np.ndarray:
    """A stored string of 0s and 1s (answers, labels) as an array of integers."""
    return np.frombuffer(text.encode(), dtype=np.uint8) - ord("0")


def bootstrap_weights(documents: list[int], draws: int = 2000, seed: int = 0, second: list | None = None) -> np.ndarray:
    """A per-document bootstrap as weights, one row per draw and one column per pair (or per document, given
    one entry per document): row 0 is the data itself (every weight 1); every other row draws as many
    documents as there are, with replacement, and weighs each pair by how often its document was drawn.
    The same seed draws the same documents whatever the pairs, so models scored alike are resampled alike, and
    two tasks alike as long as their pairs come from the same set of documents. Given each pair's `second`
    document too (B's), a pair weighs the product of its two documents' counts, or one count when both are the
    same document: a two-way bootstrap, for pairs that depend on two documents. An entry of `second` may also be
    a list of documents (chapter 10's items, whose candidates come from several): the pair then weighs the product
    of the counts of all its distinct documents."""
    if draws < 1:
        raise ValueError(f"draws={draws}: expected at least 1")
    first = np.asarray(documents)
    if second is not None and len(second) != len(first):
        raise ValueError(f"{len(second)} second documents for {len(first)} pairs: expected one per pair")
    others = [[] if s is None else [s] if np.ndim(s) == 0 else list(s)
              for s in ([None] * len(first) if second is None else second)]
    ids, index = np.unique(np.concatenate([first, [d for ds in others for d in ds]]).astype(first.dtype),
                           return_inverse=True)
    counts = np.random.default_rng(seed).multinomial(len(ids), np.full(len(ids), 1 / len(ids)), size=draws)
    counts = np.vstack([np.ones((1, len(ids))), counts])
    weights, column = counts[:, index[:len(first)]], dict(zip(ids.tolist(), range(len(ids))))
    for j, (own, extra) in enumerate(zip(first.tolist(), others)):
        for document in set(extra) - {own}:
            weights[:, j] *= counts[:, column[document]]
    return weights


def weighted_balanced_accuracy(answers, labels, weights: np.ndarray) -> np.ndarray:
    """balanced_accuracy under each row of `weights`. `answers` may be fractions: given each pair's share of
    seeds that answered 1, it returns the mean of the seeds' balanced accuracies. A row that leaves one label
    without any weight (a draw of documents with no pair of that label) has no balanced accuracy: NaN."""
    answers, labels = np.asarray(answers, dtype=float), np.asarray(labels)
    with np.errstate(invalid="ignore", divide="ignore"):  # 0/0 for such a row, reported by `interval`
        recalls = [(weights * np.where(labels == c, answers if c == 1 else 1 - answers, 0)).sum(-1)
                   / (weights * (labels == c)).sum(-1) for c in (0, 1)]
    return (recalls[0] + recalls[1]) / 2


def interval(replicates: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of a statistic's bootstrap replicates (row 0, the data itself, left out)."""
    missing = int(np.isnan(replicates[1:]).sum())
    if missing:
        raise ValueError(f"{missing} of {len(replicates) - 1} bootstrap replicates are NaN (draws that left a label "
                         f"without pairs): expected a statistic defined in every draw; use more documents")
    tail = 50 * (1 - level)
    low, high = np.percentile(replicates[1:], [tail, 100 - tail])
    return float(low), float(high)


def clustered_mcnemar(right_a, right_b, documents: list[int], labels=None) -> tuple[float, float]:
    """McNemar's test of two models answering the same pairs, made valid for pairs that come in documents
    (Durkalski et al., 2003). Per document k, d_k = (pairs only A got right) - (pairs only B got right); under
    no difference the statistic (sum of d_k)^2 / (sum of d_k^2) is chi-square with one degree of freedom.
    Returns (statistic, two-sided p). right_a, right_b: 1/0 per pair, or shares of seeds that got it right.
    Given the pairs' labels (0/1), each pair counts 1 / (pairs with its label): a test of balanced accuracy,
    which a head that merely prefers the commoner label cannot pass. (It is then conservative when one model
    is better on one label and the other on the other.) Documents are taken as fixed draws of text, and seeds,
    when answers are shares of seeds, as fixed too: the test covers the sampling of documents only."""
    difference = np.asarray(right_a, dtype=float) - np.asarray(right_b, dtype=float)
    if labels is not None:
        labels = np.asarray(labels).astype(int)
        if not set(np.unique(labels)) <= {0, 1} or len(labels) != len(difference):
            raise ValueError(f"labels {np.unique(labels)[:5]} for {len(difference)} pairs: expected one 0 or 1 per pair")
        difference = difference / np.bincount(labels, minlength=2)[labels]
    d = _by_document(difference, documents)
    if not d.any():
        return 0.0, 1.0
    statistic = float(d.sum() ** 2 / (d ** 2).sum())
    return statistic, math.erfc(math.sqrt(statistic / 2))


def _by_document(values, documents) -> np.ndarray:
    """The sum of `values` in each document (documents in sorted order): the d_k of both paired tests."""
    ids, index = np.unique(np.asarray(documents), return_inverse=True)
    return np.bincount(index, weights=values, minlength=len(ids))

def sign_flip_test(differences, documents: list[int], draws: int = 9999, seed: int = 0) -> tuple[float, float]:
    """A paired test for real-valued differences (a loss of model A minus model B, item by item) that come in
    documents. Per document k, d_k = the sum of its differences; if the two models were interchangeable, each d_k
    would be as likely to be +|d_k| as -|d_k|, so flipping the signs at random `draws` times draws the null
    distribution of |sum of d_k| exactly, with no chi-square approximation (Appendix A, section A.3). Returns
    the statistic clustered_mcnemar would, (sum of d_k)^2 / (sum of d_k^2), and the two-sided p-value
    (1 + flips at least as extreme) / (draws + 1), never 0. It assumes each d_k symmetric about 0 under no
    difference, and takes documents as the unit and the models as fixed."""
    differences = np.asarray(differences, dtype=float)
    if len(documents) != len(differences):
        raise ValueError(f"{len(documents)} documents for {len(differences)} differences: expected one per difference")
    if draws < 1:
        raise ValueError(f"draws={draws}: expected at least 1")
    d = _by_document(differences, documents)
    if not d.any():
        return 0.0, 1.0
    observed, extreme, rng = abs(d.sum()), 0, np.random.default_rng(seed)
    for start in range(0, draws, 1000):  # in blocks, so that thousands of documents fit in memory
        signs = rng.choice([-1.0, 1.0], size=(min(1000, draws - start), len(d)))
        extreme += int((np.abs(signs @ d) >= observed * (1 - 1e-12)).sum())
    return float(d.sum() ** 2 / (d ** 2).sum()), (1 + extreme) / (draws + 1)


def holm(p_values: dict) -> dict:
    """Holm's adjustment of p-values tested together, keyed as given: sorted from the smallest, the i-th
    (from 1) is multiplied by m - i + 1 and capped at 1, and no adjusted value is smaller than the one before
    it. Adjusted values below 0.05 keep the chance of any false call among the m at 5% or less."""
    bad = {key: p for key, p in p_values.items() if not 0 <= p <= 1}
    if bad:
        raise ValueError(f"p-values {bad}: expected numbers from 0 to 1")
    adjusted, running = {}, 0.0
    for i, (key, p) in enumerate(sorted(p_values.items(), key=lambda item: item[1])):
        running = max(running, min(1.0, (len(p_values) - i) * p))
        adjusted[key] = running
    return {key: adjusted[key] for key in p_values}


def welch(a, b, level: float = 0.95) -> tuple[float, tuple[float, float]]:
    """Welch's t-test of mean(a) - mean(b) for two small samples of unequal variance (here: per-seed losses):
    the two-sided p-value and the `level` interval of the difference. Seeds are the unit: this is the test that
    covers training's randomness, which resampling documents does not."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"{len(a)} and {len(b)} values: expected at least 2 a side (seeds) for a t-test")
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    difference, se = float(a.mean() - b.mean()), math.sqrt(va + vb)
    if se == 0:
        return (1.0 if difference == 0 else 0.0), (difference, difference)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = float(student_t.ppf(0.5 + level / 2, df)) * se
    return float(2 * student_t.sf(abs(difference) / se, df)), (difference - half, difference + half)
