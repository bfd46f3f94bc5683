"""The book's interactive explorers: ipywidgets front ends over plain functions that the tests check.

    parameter_explorer()  chapter 1: V, E, H, L, sharing and groups -> the parameter budget beside BERT's
    masking_explorer()    chapter 6: a document, an objective and a seed -> the pair and its masked spans
    layer_explorer()      chapter 9: a model, a layer and a token -> the L2 and angle curves over the layers
                          (all tokens and the chosen one), with the chosen layer's values
    fill_mask_explorer()  chapter 10: a text with [MASK]s, a model and k -> each mask's top-k pieces as bars

Each explorer runs in JupyterLab (the chapters call them) or as a small web app served by
`albert-edu explore` (`make explore`; see albert_edu.tools.explore).

Like albert_edu.notebook, this is interface code rather than a lesson, so it is a plain module. It imports
the chapters' modules (and torch) inside functions, so importing it costs little more than numpy.
"""

import html
import random
from pathlib import Path

from albert_edu.notebook import COLORS


def shown(render) -> str:
    """What an explorer displays: the HTML that render() returns, or, when the controls hold a value the
    function refuses (it raises ValueError naming it), that message, so a reader never sees a traceback."""
    try:
        return render()
    except ValueError as error:
        return f'<p class="explorer-result explorer-error">{html.escape(str(error))}</p>'


# ---- chapter 1: the parameter budget -------------------------------------------------------------------

def budget_text(vocab_size: int, embedding_size: int, hidden_size: int, num_hidden_layers: int,
                sharing: str = "all", num_hidden_groups: int = 1) -> str:
    """One line: the model's parameters, BERT's with the same V, H and L, and the ratio."""
    from albert_edu.params import budget_summary

    s = budget_summary(vocab_size, embedding_size, hidden_size, num_hidden_layers, sharing, num_hidden_groups)
    return (f"this model: {s['total']:,} parameters | BERT with the same V, H, L: {s['bert_total']:,} | "
            f"{100 * s['fraction_of_bert']:.1f}% of BERT")


def parameter_explorer():
    import ipywidgets as widgets

    from albert_edu.config import SHARING_MODES

    controls = dict(
        vocab_size=widgets.IntSlider(30000, min=1000, max=250000, step=1000, description="V"),
        embedding_size=widgets.Dropdown(options=[32, 64, 128, 256, 512, 768, 1024, 2048, 4096], value=128,
                                        description="E"),
        hidden_size=widgets.IntSlider(768, min=64, max=4096, step=64, description="H"),
        num_hidden_layers=widgets.IntSlider(12, min=1, max=48, description="L"),
        sharing=widgets.Dropdown(options=SHARING_MODES, value="all", description="sharing"),
        num_hidden_groups=widgets.IntSlider(1, min=1, max=48, description="G"),
    )
    result = widgets.HTML()

    def update(_=None):
        values = {k: c.value for k, c in controls.items()}
        result.value = shown(lambda: f'<p class="explorer-result">{html.escape(budget_text(**values))}</p>')

    for control in controls.values():
        control.observe(update, names="value")
    update()
    items = list(controls.values())
    return widgets.VBox([widgets.HBox(items[:3]), widgets.HBox(items[3:]), result])


# ---- chapter 6: pairs and masks ------------------------------------------------------------------------

def pair_view(documents, tokenizer, document: int, objective: str, seed: int, max_seq_len: int = 64) -> dict:
    """The first training pair that chapter 6's recipe makes from documents[document], masked: the pieces of
    [CLS] A [SEP] B [SEP] as the model sees them, which of them are to be predicted (with the original piece),
    and the pair label. Other documents only supply NSP's random B."""
    from albert_edu.pretraining_data import OBJECTIVES, mask_ngrams, segment_pairs

    if not 0 <= document < len(documents):
        raise ValueError(f"document={document}: expected 0 <= document < {len(documents)}")
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed={seed!r}: expected a non-negative integer")
    if objective not in OBJECTIVES:
        raise ValueError(f"objective={objective!r}: expected one of {OBJECTIVES}")
    rng = random.Random(seed)
    order = [documents[document]] + documents[:document] + documents[document + 1:]
    tokenized = [tokenizer.encode_batch(d.sentences) for d in order]
    if not any(tokenized[0]):  # segment_pairs would skip it and show another document's pair under its title
        raise ValueError(f"document={document} ({order[0].title!r}) has no text: expected a document with words")
    a, b, label = next(segment_pairs(tokenized, objective, max_seq_len, rng))
    ids, types = tokenizer.encode_pair(a, b)
    masked, positions, originals = mask_ngrams(ids, tokenizer, rng)
    meaning = {"sop": ("in order", "swapped"), "nsp": ("B follows A", "B from another document"),
               "none": ("in order", "in order")}[objective]
    return {"pieces": tokenizer.pieces(masked), "segments": types, "label": label, "meaning": meaning[label],
            "predict": {p: piece for p, piece in zip(positions, tokenizer.pieces(originals))},
            "document": order[0].title}


def pair_html(view: dict) -> str:
    """The pair as HTML: segment B shaded, pieces to predict outlined with the original as a tooltip."""
    out = []
    for i, (piece, segment) in enumerate(zip(view["pieces"], view["segments"])):
        style = "background:#eef" if segment else ""
        if i in view["predict"]:
            style += f";outline:2px solid {COLORS['ffn']}"
            out.append(f'<span style="{style}" title="{html.escape(view["predict"][i])}">{html.escape(piece)}</span>')
        else:
            out.append(f'<span style="{style}">{html.escape(piece)}</span>')
    return (f'<p class="explorer-result">label {view["label"]}: {html.escape(view["meaning"])} | '
            f'{len(view["predict"])} of {len(view["pieces"])} pieces to predict</p>'
            f'<p style="line-height:1.8">{" ".join(out)}</p>')


def masking_explorer(split: str = "validation"):
    import ipywidgets as widgets

    from albert_edu.pretraining_data import OBJECTIVES

    from albert_edu.corpus import load_documents
    from albert_edu.tokenizer import Tokenizer

    documents, tokenizer = load_documents(split), Tokenizer.load()
    titles = [(f"{i}: {d.title}", i) for i, d in enumerate(documents)]
    controls = dict(document=widgets.Dropdown(options=titles, value=0, description="document"),
                    objective=widgets.Dropdown(options=OBJECTIVES, value="sop", description="objective"),
                    seed=widgets.BoundedIntText(0, min=0, max=10**6, description="seed"))
    result = widgets.HTML()

    def update(_=None):
        values = {k: c.value for k, c in controls.items()}
        result.value = shown(lambda: pair_html(pair_view(documents, tokenizer, **values)))

    for control in controls.values():
        control.observe(update, names="value")
    update()
    return widgets.VBox([widgets.HBox(list(controls.values())), result])


# ---- chapter 9: embeddings across layers ---------------------------------------------------------------

def token_path(states, row: int, position: int) -> dict[str, list[float]]:
    """One token's path through the layers: for each layer, the L2 distance and the angle (degrees) between
    the token's embedding before and after it, and the angle between the layer's output and the first layer's
    input (how far the token has turned in all)."""
    import torch

    if not 0 <= row < states[0].shape[0] or not 0 <= position < states[0].shape[1]:
        raise ValueError(f"row={row}, position={position}: expected a position inside a batch of shape "
                         f"{tuple(states[0].shape[:2])}")
    vectors = [s[row, position].double() for s in states]

    def angle(x, y):
        return torch.rad2deg(torch.acos(torch.nn.functional.cosine_similarity(x, y, dim=0).clamp(-1, 1))).item()

    return {"l2": [(y - x).norm().item() for x, y in zip(vectors[:-1], vectors[1:])],
            "angle": [angle(x, y) for x, y in zip(vectors[:-1], vectors[1:])],
            "turned": [angle(vectors[0], y) for y in vectors[1:]]}


def layer_text(curves: dict[str, list[float]], path: dict[str, list[float]], layer: int, piece: str) -> str:
    """What the explorer shows for one layer (counted from 1)."""
    if not 1 <= layer <= len(curves["l2"]):
        raise ValueError(f"layer={layer}: expected 1 <= layer <= {len(curves['l2'])}")
    i = layer - 1
    return (f"layer {layer}: all tokens L2 {curves['l2'][i]:.2f}, angle {curves['angle'][i]:.1f} deg | "
            f"token {piece!r}: L2 {path['l2'][i]:.2f}, angle {path['angle'][i]:.1f} deg, "
            f"turned {path['turned'][i]:.1f} deg from its input")


def explorer_models(recipe: str = "book") -> dict[str, object]:
    """The models the layer explorer offers: chapter 8/9's trained runs of `recipe` found in the run cache or the
    committed checkpoints, and randomly initialized models of the same two geometries."""
    import torch

    from albert_edu.experiments import experiment_model, figure1_runs, finished_run
    from albert_edu.model import AlbertModel

    models = {}
    for style, run in figure1_runs(recipe).items():
        path = finished_run(run)
        if path is not None:
            models[f"{style}, trained ({recipe})"] = path
    for style, sharing in (("BERT-style", "none"), ("ALBERT-style", "all")):
        torch.manual_seed(0)
        models[f"{style}, random init"] = AlbertModel(experiment_model(sharing))
    return models


def layer_explorer(recipe: str = "book"):
    import ipywidgets as widgets

    from albert_edu.analysis import layer_states, layer_transitions, text_batch
    from albert_edu.corpus import load_documents
    from albert_edu.model import AlbertModel
    from albert_edu.tokenizer import Tokenizer

    tokenizer = Tokenizer.load()
    batch = text_batch(load_documents("validation"), tokenizer, max_seq_len=64, count=32)
    models = explorer_models(recipe)
    length = int(batch["attention_mask"][0].sum())
    pieces = tokenizer.pieces(batch["input_ids"][0, :length].tolist())
    cache = {}

    def measured(name):
        if name not in cache:
            model = models[name]
            model = AlbertModel.from_pretrained(model) if isinstance(model, Path) else model
            states = layer_states(model, batch)
            cache[name] = (states, layer_transitions(states, batch["attention_mask"]))
        return cache[name]

    layers = len(measured(next(iter(models)))[1]["l2"])
    controls = dict(model=widgets.Dropdown(options=list(models), description="model"),
                    layer=widgets.IntSlider(1, min=1, max=layers, description="layer"),
                    position=widgets.Dropdown(options=[(f"{i}: {p}", i) for i, p in enumerate(pieces)], value=1,
                                              description="token"))
    result, figure = widgets.HTML(), widgets.Output()

    def update(_=None):
        states, curves = measured(controls["model"].value)
        layer, position = controls["layer"].value, controls["position"].value
        figure.clear_output(wait=True)

        def render():
            path = token_path(states, 0, position)
            text = layer_text(curves, path, layer, pieces[position])
            with figure:
                draw_layer_curves(curves, path, layer, pieces[position])
            return f'<p class="explorer-result">{html.escape(text)}</p>'

        result.value = shown(render)

    for control in controls.values():
        control.observe(update, names="value")
    update()
    return widgets.VBox([widgets.HBox(list(controls.values())), result, figure])


def draw_layer_curves(curves: dict[str, list[float]], path: dict[str, list[float]], layer: int, piece: str) -> None:
    """Chapter 9's two measures over the layers, for all tokens and for one, with the chosen layer marked."""
    import matplotlib.pyplot as plt

    layers = range(1, len(curves["l2"]) + 1)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3))
    for ax, key, label in zip(axes, ("l2", "angle"), ("L2 distance", "angle (degrees)")):
        ax.plot(layers, curves[key], "o-", color=COLORS["ALBERT"], label="all tokens (mean)")
        ax.plot(layers, path[key], "s--", color=COLORS["embeddings"], label=f"token {piece!r}")
        ax.axvline(layer, color="k", linewidth=0.8)
        ax.set_xlabel("layer")
        ax.set_title(f"{label}: a layer's input vs output")
        ax.set_xticks(list(layers))
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    plt.show()


# ---- chapter 10: fill-mask ---------------------------------------------------------------------------------

def fill_mask_models(recipe: str = "book") -> dict[str, object]:
    """The models the fill-mask explorer offers: the book's pre-trained ALBERT (chapter 7, as a pair of its
    checkpoint and its tokenizer's folder), chapter 8's trained runs of `recipe` found in the run cache or the
    committed checkpoints, the checkpoint that ALBERT_CHECKPOINT names (when set), and a randomly initialized model
    of the book's geometry."""
    import os

    import torch

    from albert_edu.downstream import CHECKPOINT_VARIABLE
    from albert_edu.experiments import CHECKPOINTS_DIR, finished_run, recipe_model, table5_runs
    from albert_edu.model import AlbertForPreTraining
    from albert_edu.sources import LARGE_DIR

    models = {}
    book = CHECKPOINTS_DIR / "albert-book"  # chapter 7's pre-trained ALBERT, committed with the book
    if (book / "model.safetensors").is_file():  # with the tokenizer it was trained with
        models["the book's ALBERT (chapter 7)"] = (book, LARGE_DIR / "tokenizer")
    for run in table5_runs(recipe):
        path = finished_run(run)
        if path is not None:
            models[f"{run.training.objective.upper() if run.training.objective != 'none' else 'MLM only'}, "
                   f"trained ({recipe})"] = path
    if os.environ.get(CHECKPOINT_VARIABLE):
        models[f"{CHECKPOINT_VARIABLE}: {Path(os.environ[CHECKPOINT_VARIABLE]).name}"] = Path(os.environ[CHECKPOINT_VARIABLE])
    torch.manual_seed(0)
    models["random init"] = AlbertForPreTraining(recipe_model(recipe))
    return models


def fill_mask_html(guesses: list[list[tuple[str, float]]]) -> str:
    """fill_mask's answer as a line of text (what the tests read) and, per mask, its pieces as bars."""
    summary = " | ".join(f"[MASK] {m + 1}: " + ", ".join(f"{p} {q:.1%}" for p, q in row[:3])
                         for m, row in enumerate(guesses))
    out = [f'<p class="explorer-result">{len(guesses)} mask{"s" if len(guesses) > 1 else ""}: '
           f'{html.escape(summary)}</p>']
    for m, row in enumerate(guesses):
        out.append(f"<p><b>[MASK] {m + 1}</b></p>")
        for piece, q in row:
            width = max(1, round(300 * q))
            out.append(f'<div style="display:flex;align-items:center;gap:8px"><code style="width:110px">'
                       f'{html.escape(piece)}</code><div style="width:{width}px;height:12px;background:'
                       f'{COLORS["ALBERT"]}"></div><span>{q:.2%}</span></div>')
    return "".join(out)


def fill_mask_explorer(recipe: str = "book", text: str = "paris is the [MASK] of france."):
    import ipywidgets as widgets

    from albert_edu.downstream import fill_mask, load_checkpoint_and_tokenizer
    from albert_edu.model import AlbertForPreTraining
    from albert_edu.tokenizer import Tokenizer

    models, loaded = fill_mask_models(recipe), {}

    def model_and_tokenizer(name):
        if name not in loaded:
            model = models[name]
            if isinstance(model, tuple):  # a checkpoint and the folder of the tokenizer it was trained with
                loaded[name] = (AlbertForPreTraining.from_pretrained(model[0]).eval(), Tokenizer.load(model[1]))
            else:
                loaded[name] = load_checkpoint_and_tokenizer(model) if isinstance(model, Path) else (model, Tokenizer.load())
        return loaded[name]

    controls = dict(text=widgets.Text(value=text, description="text", continuous_update=False,
                                      layout=widgets.Layout(width="480px")),
                    model=widgets.Dropdown(options=list(models), description="model"),
                    top_k=widgets.IntSlider(5, min=1, max=10, description="top k"))
    result = widgets.HTML()

    def update(_=None):
        model, tokenizer = model_and_tokenizer(controls["model"].value)
        result.value = shown(lambda: fill_mask_html(fill_mask(model, tokenizer, controls["text"].value,
                                                              controls["top_k"].value)))

    for control in controls.values():
        control.observe(update, names="value")
    update()
    return widgets.VBox([widgets.HBox(list(controls.values())), result])
