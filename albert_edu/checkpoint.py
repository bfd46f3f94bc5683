"""Reading and writing checkpoint directories in transformers' layout: config.json + model.safetensors.

Bookkeeping rather than ALBERT, so a plain module that the book uses without walking through it: chapter 5
(section 5.5) states what it guarantees and shows it. Tensor names are translated by a table of patterns, the
fused query/key/value map is split on the way out and joined on the way in, and tensors are read with
safetensors only; nothing is ever unpickled."""

import json
import re
import warnings
from dataclasses import fields, replace
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from albert_edu.config import TRANSFORMERS_SHARING, AlbertConfig, transformers_groups

WEIGHTS, CONFIG = "model.safetensors", "config.json"
# Weights under our own tensor names go to a file of another name: transformers looks for model.safetensors,
# so it refuses such a directory instead of loading it with a randomly initialised encoder.
OUR_WEIGHTS = "albert_edu.safetensors"
GEOMETRY = ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "intermediate_size")
_GROUP = "encoder.albert_layer_groups.{}.albert_layers.0."
# (our name pattern, transformers' name pattern); {} is the index of a stored block
_RENAMES = [
    ("embeddings.projection.", "encoder.embedding_hidden_mapping_in."),
    ("encoder.attention_blocks.{}.dense.", _GROUP + "attention.dense."),
    ("encoder.attention_blocks.{}.LayerNorm.", _GROUP + "attention.LayerNorm."),
    ("encoder.ffn_blocks.{}.ffn.", _GROUP + "ffn."),
    ("encoder.ffn_blocks.{}.ffn_output.", _GROUP + "ffn_output."),
    ("encoder.ffn_blocks.{}.LayerNorm.", _GROUP + "full_layer_layer_norm."),
]
_QKV = ("encoder.attention_blocks.{}.qkv.", _GROUP + "attention.")
TIED = {"predictions.decoder.weight": "albert.embeddings.word_embeddings.weight",
        "predictions.decoder.bias": "predictions.bias"}


def transformers_expressible(c: AlbertConfig) -> bool:
    """Can transformers' ALBERT, which shares whole layers in groups, hold this model? (chapter 1)"""
    return c.sharing in TRANSFORMERS_SHARING


def _rename(name: str, patterns: list[tuple[str, str]]) -> str:
    for source, target in patterns:
        regex = "^(.*?)" + re.escape(source).replace(r"\{\}", r"(\d+)")
        match = re.match(regex, name)
        if match:
            prefix, *index = match.groups()
            return prefix + target.format(*index) + name[match.end():]
    return name


def to_transformers_names(state: dict[str, torch.Tensor], c: AlbertConfig) -> dict[str, torch.Tensor]:
    """Our state dict -> transformers' tensor names; splits the fused query/key/value map."""
    out = {}
    for name, tensor in state.items():
        qkv = re.match("^(.*?)" + re.escape(_QKV[0]).replace(r"\{\}", r"(\d+)") + "(weight|bias)$", name)
        if qkv:
            prefix, block, kind = qkv.groups()
            for part, piece in zip(("query.", "key.", "value."), tensor.chunk(3)):
                out[prefix + _QKV[1].format(block) + part + kind] = piece.contiguous()
        else:
            out[_rename(name, _RENAMES)] = tensor
    if not c.projects_embeddings:  # transformers always has the E -> H map: an identity is exact
        prefix = "albert." if any(n.startswith("albert.") for n in state) else ""
        out[prefix + "encoder.embedding_hidden_mapping_in.weight"] = torch.eye(c.hidden_size)
        out[prefix + "encoder.embedding_hidden_mapping_in.bias"] = torch.zeros(c.hidden_size)
    return out


def from_transformers_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' tensor names -> ours; joins query, key and value into the fused map."""
    out, pieces = {}, {}
    qkv = re.compile("^(.*?)" + re.escape(_QKV[1]).replace(r"\{\}", r"(\d+)") + r"(query|key|value)\.(weight|bias)$")
    for name, tensor in state.items():
        match = qkv.match(name)
        if match:
            prefix, block, part, kind = match.groups()
            pieces.setdefault((prefix, block, kind), {})[part] = tensor
        else:
            out[_rename(name, [(t, s) for s, t in _RENAMES])] = tensor
    for (prefix, block, kind), parts in pieces.items():
        if set(parts) != {"query", "key", "value"}:
            missing = sorted({"query", "key", "value"} - set(parts))
            raise ValueError(f"checkpoint has an incomplete attention block {block}: no {missing} {kind}")
        out[prefix + _QKV[0].format(block) + kind] = torch.cat([parts["query"], parts["key"], parts["value"]])
    return out


def config_to_json(c: AlbertConfig, architecture: str, extra: dict) -> dict:
    """Our fields plus what transformers needs to rebuild the same model."""
    data = {"model_type": "albert", "architectures": [architecture], **c.to_dict(), **extra,
            "inner_group_num": 1, "tie_word_embeddings": True}
    data["num_hidden_groups"] = transformers_groups(c)  # "none" is written as one group per layer
    return data


def config_from_json(data: dict, path: Path) -> AlbertConfig:
    """Read our config.json or transformers'; unknown transformers keys are ignored, unsupported ones refused."""
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds a JSON {type(data).__name__}; expected an object of ALBERT's fields")
    missing = [key for key in GEOMETRY if key not in data]
    if missing:
        raise ValueError(f"{path} lacks {missing}; expected an ALBERT config.json")
    if data.get("model_type", "albert") != "albert":
        raise ValueError(f"{path} has model_type={data['model_type']!r}; expected 'albert'")
    if data.get("inner_group_num", 1) != 1:
        raise ValueError(f"{path} has inner_group_num={data['inner_group_num']}; only 1 is supported")
    if data.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{path} has position_embedding_type={data['position_embedding_type']!r}; expected 'absolute'")
    known = {f.name for f in fields(AlbertConfig)}
    values = {k: v for k, v in data.items() if k in known}
    if values.get("sharing") == "none":  # written as one group per layer for transformers
        values["num_hidden_groups"] = 1
    try:
        return AlbertConfig(**values)
    except ValueError as error:  # a mistyped or impossible field: say which file holds it
        raise ValueError(f"{path}: {error}") from None


LAYOUTS = ("auto", "transformers", "ours")


def save_pretrained(model: torch.nn.Module, path, layout: str = "auto") -> None:
    """Write config.json and the weights. layout: "transformers" = model.safetensors with transformers' tensor
    names (ValueError when transformers cannot express the sharing strategy); "ours" = albert_edu.safetensors
    with our own names; "auto" = transformers' layout whenever it can express the model, ours otherwise."""
    c, path = model.config, Path(path)
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}: expected one of {LAYOUTS}")
    if layout == "transformers" and not transformers_expressible(c):
        raise ValueError(f"sharing={c.sharing!r} cannot be expressed in transformers' ALBERT format, which shares "
                         f"whole layers only; save with layout='ours' (or 'auto', which chooses it)")
    as_transformers = layout == "transformers" or layout == "auto" and transformers_expressible(c)
    if layout == "auto" and not as_transformers:
        warnings.warn(f"sharing={c.sharing!r} cannot be expressed in transformers' layout: saved with albert_edu's "
                      f"own tensor names in {OUR_WEIGHTS}, which albert_edu loads and transformers refuses",
                      stacklevel=3)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}  # files hold no device
    if as_transformers:
        state = to_transformers_names(state, c)
    path.mkdir(parents=True, exist_ok=True)
    weights, other = (WEIGHTS, OUR_WEIGHTS) if as_transformers else (OUR_WEIGHTS, WEIGHTS)
    tmp_weights, tmp_config = path / (weights + ".tmp"), path / (CONFIG + ".tmp")
    data = config_to_json(c, type(model).__name__, model.checkpoint_fields())
    try:
        save_file(state, tmp_weights, metadata={"format": "pt"})
        tmp_config.write_text(json.dumps(data, indent=2) + "\n")
    except (OSError, SafetensorError) as error:  # a full disk, most often: no half-written file is left
        tmp_weights.unlink(missing_ok=True)
        tmp_config.unlink(missing_ok=True)
        raise OSError(f"could not write the model to {path} ({error}); expected room for "
                      f"{sum(t.numel() * t.element_size() for t in state.values()):,} bytes of weights") from error
    tmp_weights.replace(path / weights)
    tmp_config.replace(path / CONFIG)
    (path / other).unlink(missing_ok=True)  # weights of an earlier save in the other layout


def read_checkpoint(path) -> tuple[AlbertConfig, dict[str, torch.Tensor], dict]:
    """The configuration, the tensors (under our names) and the raw config.json of a checkpoint directory."""
    path = Path(path)
    if not (path / CONFIG).is_file():
        raise FileNotFoundError(f"{path / CONFIG} not found: expected a checkpoint directory with {CONFIG} and {WEIGHTS}")
    found = [path / name for name in (WEIGHTS, OUR_WEIGHTS) if (path / name).is_file()]
    if len(found) > 1:
        raise ValueError(f"{path} holds both {WEIGHTS} and {OUR_WEIGHTS}; expected one set of weights")
    if not found:
        pickled = [p.name for p in path.glob("*.bin")] + [p.name for p in path.glob("*.pt")]
        hint = f" ({pickled} are pickles, which albert_edu never loads; convert them to safetensors)" if pickled else ""
        raise FileNotFoundError(f"{path / WEIGHTS} not found{hint}")
    weights = found[0]
    try:
        data = json.loads((path / CONFIG).read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(f"{path / CONFIG} is not UTF-8 text (byte {error.start}): expected the JSON of a "
                         f"config.json") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path / CONFIG} is not valid JSON: {error}") from None
    try:
        tensors = load_file(weights)
    except (SafetensorError, OSError) as error:
        raise ValueError(f"{weights} is not a readable safetensors file (truncated or corrupt?): {error}") from None
    for tied, source in TIED.items():
        if tied in tensors:  # older checkpoints store the tied decoder twice; it must equal its source
            twin = tensors.get(source)
            if twin is None or not torch.equal(tensors.pop(tied), twin):
                raise ValueError(f"{weights}: {tied} differs from {source}, but the decoder must be tied")
    return config_from_json(data, path / CONFIG), from_transformers_names(tensors), data


def _adapt_projection(c: AlbertConfig, state: dict[str, torch.Tensor]) -> AlbertConfig:
    """E = H: drop an identity E -> H map (exactly what we save for models without one); keep any other, as
    transformers' models do, unless the config says there is none."""
    names = [n for n in state if n.endswith("embeddings.projection.weight")]
    if c.embedding_size != c.hidden_size or not names or c.embedding_projection is True:
        return c
    weight_name, bias_name = names[0], names[0][:-len("weight")] + "bias"
    if torch.equal(state[weight_name], torch.eye(c.hidden_size)) and not state[bias_name].any():
        del state[weight_name], state[bias_name]
        return c
    if c.embedding_projection is False:
        raise ValueError("config.json says embedding_projection=false, but the checkpoint has a non-identity "
                         "E -> H map; expected the identity that save_pretrained writes")
    return replace(c, embedding_projection=True)


HEADS = ("predictions.", "sop_classifier.", "classifier.")
FRESH_IF_MISSING = HEADS + ("albert.pooler.", "pooler.")  # transformers' masked-LM models have no pooler


def load_pretrained(cls, path):
    """Build `cls` from a checkpoint directory. The encoder must match exactly. A head (or pooler) that `cls` has
    and the checkpoint lacks is freshly initialized, with a warning: that is how fine-tuning starts from a
    pre-trained encoder. Heads of other model classes in the checkpoint are ignored."""
    c, state, data = read_checkpoint(path)
    c = _adapt_projection(c, state)
    model = cls(c, **cls.arguments_from(data))
    expected = model.state_dict()
    wants_prefix = any(name.startswith("albert.") for name in expected)
    has_prefix = any(name.startswith("albert.") for name in state)
    if wants_prefix and not has_prefix:
        state = {("albert." + k if not k.startswith(HEADS) else k): v for k, v in state.items()}
    elif has_prefix and not wants_prefix:
        state = {k[len("albert."):]: v for k, v in state.items() if k.startswith("albert.")}
    fresh = []  # keys of heads the checkpoint lacks entirely; a head present in part is an error below
    for prefix in FRESH_IF_MISSING:
        keys = [k for k in expected if k.startswith(prefix)]
        if not any(k in state for k in keys):
            fresh += keys
    other_heads = tuple(h for h in HEADS if not any(k.startswith(h) for k in expected))
    missing = [k for k in expected if k not in state and k not in fresh]
    unexpected = [k for k in state if k not in expected and not (other_heads and k.startswith(other_heads))]
    misshaped = [f"{k} {tuple(state[k].shape)} != {tuple(v.shape)}" for k, v in expected.items()
                 if k in state and state[k].shape != v.shape]
    if missing or unexpected or misshaped:
        raise ValueError(f"checkpoint {path} does not fit {cls.__name__} with its config.json: "
                         f"missing {missing}, unexpected {unexpected}, mis-shaped {misshaped}")
    if fresh:
        warnings.warn(f"{path} has no {sorted({k.rsplit('.', 1)[0] for k in fresh})}; initialized them randomly")
    model.load_state_dict({k: v for k, v in state.items() if k in expected}, strict=False)
    return model


__all__ = ['WEIGHTS', 'CONFIG', 'OUR_WEIGHTS', 'GEOMETRY', 'TIED', 'transformers_expressible', 'to_transformers_names', 'from_transformers_names', 'config_to_json', 'config_from_json', 'LAYOUTS', 'save_pretrained', 'read_checkpoint', 'HEADS', 'FRESH_IF_MISSING', 'load_pretrained']
