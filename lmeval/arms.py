"""The edit of a ``probe lmeval`` run: its units resolved and checked, and one arm per recipe that runs on the model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import ProbeError
from interventions.config import ABConfig
from lmeval.config import MODEL_NAME

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from access.units import NeuronSet


def checked_neurons(ab: ABConfig, model: PreTrainedModel) -> NeuronSet:
    """The units the options name (``probe intervene``'s resolver), checked against ``model`` (a skeleton will do)."""
    from access.units import check_against_model
    from interventions.ab import resolve_neurons

    neurons = resolve_neurons(ab)
    check_against_model(
        neurons, model, f"--units {ab.units}" if ab.units else str(ab.neurons or "the run's neuron set")
    )
    return neurons


def skeleton(model_dir: str | Path) -> PreTrainedModel:
    """The model of ``model_dir`` built on the meta device: its layout and sizes, no weights,
    in a fraction of a second."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from core.models import check_model_dir

    check_model_dir(model_dir, "--model-dir")
    with torch.device("meta"):
        config = AutoConfig.from_pretrained(str(model_dir), trust_remote_code=False)
        model: PreTrainedModel = AutoModelForCausalLM.from_config(config)
        return model


def edit_arms(
    ab: ABConfig, model: PreTrainedModel, model_dir: str | Path, neurons: Any = None
) -> tuple[Any, list[Any]]:
    """(neurons, arms) for ``model``: the units resolved and checked, one arm per recipe (and dose) that runs on it."""
    from core.models import check_same_tokenizer, load_causal_lm, load_tokenizer
    from interventions.ab import recipe_settings, resolve_source_dir
    from interventions.recipes import RunData, plan_arms

    neurons = neurons if neurons is not None else checked_neurons(ab, model)
    models = {ab.model: model}

    def model_of(name: str) -> PreTrainedModel:
        if name not in models:
            source, tokenizer = load_causal_lm(
                resolve_source_dir(ab), "--source-dir", dtype=model.dtype, device=str(model.device), eval_mode=True
            )
            check_same_tokenizer(
                load_tokenizer(model_dir, "--model-dir"),
                tokenizer,
                "the patched model and its source (--edit patch)",
                (ab.model, name),
            )
            models[name] = source
        return models[name]

    arms = [arm for arm in plan_arms(RunData(recipe_settings(ab), neurons, model_of)) if arm.model == ab.model]
    for arm in arms:
        for edit in arm.edits:
            edit.check(model)
    return neurons, arms


def single_arm(spec: dict[str, Any], model: PreTrainedModel, model_dir: str | Path) -> Any:
    """The one arm that ``probe-edited``'s edit options (lm-eval ``model_args``) describe."""
    spec = dict(spec)
    if "edit" in spec:
        spec["edits"] = spec.pop("edit")
    if isinstance(spec.get("units"), str):
        spec["units"] = spec["units"].replace(";", ",")  # commas separate lm-eval's model_args
    if "factor" in spec:
        spec["factor"] = float(spec["factor"])
    _, arms = edit_arms(ABConfig(**spec, model_dir=model_dir, positive_control=False, placebo=0), model, model_dir)
    if len(arms) != 1:
        raise ProbeError(
            f"{MODEL_NAME}: one edit per model, but the options give {len(arms)} ({', '.join(a.name for a in arms)}); "
            "`probe lmeval` compares several arms against one unedited pass"
        )
    return arms[0]
