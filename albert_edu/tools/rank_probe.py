"""What the masked-LM head's rank costs a trained encoder (chapter 11, closing section). The grid's not-shared
E = 128 run (data/checkpoints/rank-probe-none-E128-s0.safetensors) scores every piece from the E-wide vector that
feeds its tied output embedding. Cut those vectors to rank r (r = 16, 32, 64: the grid's smaller E) two ways:

- by principal directions: the vectors' mean plus their projection on the top r - 1 principal directions;
- by a map fitted to the loss: mean + (x - mean) A B, A of E x (r - 1) and B of (r - 1) x E, started at the
  principal directions and trained with Adam on the masked pieces, stopped where a validation part is best.

Either way, the scores of all positions have rank at most r. Each cut is fitted on one half of the held-out
documents and scored on the other half, both ways round, so every rise in loss is out of sample.

    python -m albert_edu.tools.rank_probe    # about 15 minutes on 2 cores -> data/results/rank-probe.json
"""

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from albert_edu.tools.manifest import ROOT

CHECKPOINT = ROOT / "data" / "checkpoints" / "rank-probe-none-E128-s0.safetensors"
CHECKPOINT_SHA256 = "1c85e11324b144c7f4f53263d6c9bbe2f427bdeffef8b7ef8ae45663de1fbe6c"
RESULTS = ROOT / "data" / "results" / "rank-probe.json"
RANKS = (16, 32, 64)
STEPS, BATCH, LR, EVAL_EVERY, SEED = 600, 2048, 1e-3, 50, 0
COMMAND = "python -m albert_edu.tools.rank_probe"


def load_checkpoint(path: Path = CHECKPOINT):
    """The committed model in float32, after checking its sha256."""
    from safetensors import safe_open

    from albert_edu import AlbertConfig, AlbertForPreTraining

    found = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    if found != CHECKPOINT_SHA256:
        raise ValueError(f"{path}: sha256 {found}, expected {CHECKPOINT_SHA256} (the committed rank-probe weights)")
    with safe_open(path, "pt") as f:
        model = AlbertForPreTraining(AlbertConfig(**json.loads(f.metadata()["config"])))
        model.load_state_dict({k: f.get_tensor(k).float() for k in f.keys()})
    return model


def head_inputs(model, examples) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, float]:
    """At every masked piece of `examples`, in order: the vector that feeds the tied output embedding (float64),
    the piece, and its document; and the model's own mean loss on them."""
    from albert_edu.training import predict

    vectors, pieces = [], []
    hooks = [model.predictions.LayerNorm.register_forward_hook(lambda m, i, out: vectors.append(out.detach().double())),
             model.register_forward_hook(lambda m, args, kwargs, out: pieces.append(kwargs["labels"][kwargs["labels"] != -100]),
                                         with_kwargs=True)]
    try:
        seen = predict(model, examples)
    finally:
        for hook in hooks:
            hook.remove()
    documents = np.array([e.document for e in examples for _ in e.mlm_positions])
    vectors, pieces = torch.cat(vectors), torch.cat(pieces)
    if not len(vectors) == len(pieces) == len(documents):
        raise ValueError(f"{len(vectors)} vectors, {len(pieces)} pieces, {len(documents)} documents: expected equal")
    return vectors, pieces, documents, seen["mlm_loss_sum"] / seen["mlm_total"]


def mean_loss(vectors: torch.Tensor, pieces: torch.Tensor, table: torch.Tensor, bias: torch.Tensor) -> float:
    """The masked-LM loss of the tied head's scores, vectors @ table.T + bias, in chunks of 4,096 positions."""
    return sum(float(F.cross_entropy(v.float() @ table.T + bias, t, reduction="sum"))
               for v, t in zip(vectors.split(4096), pieces.split(4096))) / len(pieces)


def principal_cut(fit: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean of `fit` and its top rank - 1 principal directions (rows)."""
    if not isinstance(rank, int) or not 1 <= rank <= fit.shape[1]:
        raise ValueError(f"rank={rank!r}: expected an integer from 1 to {fit.shape[1]}")
    centre = fit.mean(0)
    return centre, torch.linalg.svd(fit - centre, full_matrices=False).Vh[: rank - 1]


def fitted_cut(train, valid, table, bias, rank: int, steps: int = STEPS, lr: float = LR, seed: int = SEED):
    """A rank-`rank` map fitted to the loss on `train` (vectors, pieces), started at the principal cut; the state
    with the lowest loss on `valid`, checked every EVAL_EVERY steps (and at the start), is returned as a function
    of the vectors, with the validation curve."""
    (x, y), (vx, vy) = train, valid
    centre, directions = principal_cut(x, rank)
    centre, directions = centre.float(), directions.float()
    down, up = torch.nn.Parameter(directions.T.clone()), torch.nn.Parameter(directions.clone())
    shift = torch.nn.Parameter(centre.clone())
    apply = lambda v: shift + (v.float() - centre) @ down @ up  # noqa: E731
    optimizer = torch.optim.Adam([down, up, shift], lr=lr)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        curve = [mean_loss(apply(vx), vy, table, bias)]
    best = (curve[0], [p.detach().clone() for p in (down, up, shift)])
    for step in range(1, steps + 1):
        rows = torch.randint(len(x), (BATCH,), generator=generator)
        loss = F.cross_entropy(apply(x[rows]) @ table.T + bias, y[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % EVAL_EVERY == 0:
            with torch.no_grad():
                curve.append(mean_loss(apply(vx), vy, table, bias))
            if curve[-1] < best[0]:
                best = (curve[-1], [p.detach().clone() for p in (down, up, shift)])
    down_, up_, shift_ = best[1]
    return (lambda v: shift_ + (v.float() - centre) @ down_ @ up_), curve


def halves(documents: np.ndarray) -> list[np.ndarray]:
    """Two masks over the pieces: the documents at even and at odd places in sorted order."""
    order = {d: k for k, d in enumerate(sorted(set(documents.tolist())))}
    even = np.array([order[d] % 2 == 0 for d in documents.tolist()])
    return [even, ~even]


def probe(model, vectors, pieces, documents, ranks=RANKS, steps: int = STEPS) -> list[dict]:
    """For each way round (fit on one half of the documents, score on the other) and each rank: the full head's loss
    on the scored half and the rise of each cut. The loss-fitted map trains on the fitting half's even documents
    and stops where its odd ones are best."""
    table = model.albert.embeddings.word_embeddings.weight.detach()
    bias = model.predictions.bias.detach()
    folds = []
    for fit, scored in (halves(documents), halves(documents)[::-1]):
        fit_rows = np.flatnonzero(fit)
        train, valid = (fit_rows[m] for m in halves(documents[fit_rows]))
        full = mean_loss(vectors[scored], pieces[scored], table, bias)
        fold = {"fit_documents": len(set(documents[fit].tolist())), "scored_pieces": int(scored.sum()),
                "full_loss": full, "ranks": {}}
        for rank in ranks:
            centre, directions = principal_cut(vectors[fit], rank)
            cut = centre + (vectors[scored] - centre) @ directions.T @ directions
            mapped, curve = fitted_cut((vectors[train], pieces[train]), (vectors[valid], pieces[valid]), table, bias,
                                       rank, steps)
            with torch.no_grad():
                fitted = mean_loss(mapped(vectors[scored]), pieces[scored], table, bias)
            fold["ranks"][str(rank)] = {"principal_rise": mean_loss(cut, pieces[scored], table, bias) - full,
                                        "fitted_rise": fitted - full, "validation_curve": curve}
            print(f"rank {rank}: principal +{fold['ranks'][str(rank)]['principal_rise']:.3f}, "
                  f"fitted +{fitted - full:.3f} (best validation at step {EVAL_EVERY * int(np.argmin(curve))})",
                  flush=True)
        folds.append(fold)
    return folds


def main(argv=None) -> None:
    from albert_edu.ablation_grid import ABLATION_LENGTH
    from albert_edu.corpus import DATA_DIR
    from albert_edu.experiments import held_out_examples
    from albert_edu.tools.checkpoints import commit
    from albert_edu.tools.table5_book import made_where

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = time.time()
    torch.manual_seed(SEED)
    model = load_checkpoint()
    vectors, pieces, documents, own = head_inputs(model, held_out_examples(DATA_DIR, ABLATION_LENGTH, 1, "neutral")["sop"])
    folds = probe(model, vectors, pieces, documents)
    result = {"command": COMMAND, **made_where(), "code": commit(), "threads": torch.get_num_threads(),
              "minutes": round((time.time() - started) / 60, 1), "checkpoint": str(CHECKPOINT.relative_to(ROOT)),
              "checkpoint_sha256": CHECKPOINT_SHA256, "held_out": "one pass of the neutral held-out SOP examples, T = 64",
              "pieces": len(pieces), "model_loss": own,
              "settings": {"ranks": list(RANKS), "steps": STEPS, "batch": BATCH, "lr": LR, "eval_every": EVAL_EVERY,
                           "seed": SEED},
              "folds": folds}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out} in {result['minutes']} minutes")


if __name__ == "__main__":
    main()
