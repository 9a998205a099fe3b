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
    from interventions.recipes import Arm


def checked_neurons(ab: ABConfig, model: PreTrainedModel) -> NeuronSet:
    """The units the options name (``probe intervene``'s resolver), checked against ``model`` (a skeleton will do)."""
    from interventions.plan import checked_selections

    return checked_selections(ab, model)[""]


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
    ab: ABConfig, model: PreTrainedModel, model_dir: str | Path, neurons: NeuronSet | None = None
) -> tuple[NeuronSet, list[Arm]]:
    """(neurons, arms) for ``model``: the units resolved and checked, and ``probe intervene``'s plan of the arms that
    run on it (:func:`interventions.plan.planned_arms`), with their placebo sets."""
    from core.models import load_tokenizer
    from interventions.plan import ModelPool, planned_arms

    neurons = neurons if neurons is not None else checked_neurons(ab, model)
    pool = ModelPool(ab, {ab.model: Path(model_dir)}, {ab.model: model}, load_tokenizer(model_dir, "--model-dir"))
    return neurons, planned_arms(ab, {"": neurons}, pool.model, only_model=ab.model)


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
