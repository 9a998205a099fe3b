"""``LMEvalConfig``: one validated description of a ``probe lmeval`` run, for the CLI and the library.

Its fields make the command's options (:mod:`probe_cli.options`) and its ``--config`` keys; the edit options are
``probe intervene``'s (:class:`interventions.config.ABConfig`) and are checked by it. Kept apart from
:mod:`lmeval.run` so that the command line reads it without torch.

Example:
    >>> cfg = LMEvalConfig(tasks="mmlu,gsm8k", model_dir="m", units="20:3,20:9", factor=0.0)
    >>> cfg.tasks, cfg.ab_config().factors
    (['mmlu', 'gsm8k'], [0.0])
    >>> LMEvalConfig(model_dir="m", units="20:3").tasks, LMEvalConfig(model_dir="m", units="20:3", split="test").tasks
    (['probe_heldout'], ['probe_test'])
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from core.config_fields import flat_fields, nested, option
from core.config_file import NON_NEGATIVE_COUNT, POSITIVE, RANDOM_SETS, RESAMPLES, SEED, choice, typed_config
from core.config_init import flat_init
from core.errors import ProbeError
from core.run_dir import InterventionDir
from interventions.config import ABConfig
from interventions.edit_spec import EditSpec
from lmeval.tasks import OWN_TASKS, own_task_name
from training.eval_config import DEFAULT_SPLIT, SPLITS

MODEL_NAME = "probe-edited"  # the lm-eval model that applies the toolkit's edits (lmeval.model)

# what `probe-edited` takes as model_args besides the EditSpec's settings ("edit" = "edits")
EDIT_FIELDS: frozenset[str] = frozenset(
    {*flat_fields(EditSpec), "edit", "run_dir", "capability", "model", "source_dir"}
)


@flat_init
@dataclass
@typed_config
class LMEvalConfig:
    """Which lm-eval tasks, which model, which edit (the options of ``probe intervene``), and how to compare."""

    tasks: str | list[str] = option(
        help="lm-eval tasks, groups or task YAML files, comma-separated, e.g. mmlu,gsm8k (default: the toolkit's "
        "probe_heldout, or probe_test with --split test).",
        default_factory=list,
    )
    split: str = option(
        DEFAULT_SPLIT,
        "Without --tasks, the toolkit's own task over the capability's rows of this split, judged by the rule judge: "
        "heldout (probe_heldout: never trained on, constraints checked) or test (probe_test: the run's data file).",
    )
    include_path: list[str | Path] = option(
        help="Directory (or file) of local task YAMLs; repeatable.", default_factory=list, flag_type=Path, repeat=True
    )
    trust_task_code: bool = option(
        False,
        "Run the Python that local tasks name (!function, HF Evaluate metrics); only for task folders you trust.",
    )
    limit: Annotated[int, POSITIVE] | None = option(None, "At most N items per task (the same items in every pass).")
    num_fewshot: Annotated[int, NON_NEGATIVE_COUNT] | None = option(
        None, "Few-shot examples per item (default: the task's)."
    )
    apply_chat_template: bool = option(
        False,
        "Render prompts with the model's chat template (lm-eval's apply_chat_template).",
        flag="--chat-template",
    )
    gen_kwargs: str | None = option(None, "lm-eval generation overrides, e.g. max_gen_toks=64.")
    run_dir: str | Path | None = option(None, "Run directory from `probe run` (model dirs, ranking, means).")
    capability: str = option(
        "multi_turn", "The run's capability whose ranking and means define the edit.", aliases=["-c"]
    )
    model: str = option("dpo", "Which model of the pair to evaluate: sft or dpo.")
    edit: EditSpec = nested(EditSpec)
    placebo: Annotated[int, RANDOM_SETS] = option(0, "Random matched unit sets per arm, each a full lm-eval pass.")
    seed: Annotated[int, SEED] = option(0, "Seed of the bootstrap and the placebo draws.")  # lm-eval keeps its own
    n_bootstrap: Annotated[int, RESAMPLES] = option(10_000, "Bootstrap resamples for the CIs.", flag="--bootstrap")
    batch_size: Annotated[int, POSITIVE] = option(8, "lm-eval batch size.")
    dtype: str = option("float32", "Model dtype: float32, bfloat16 or float16.")
    device: str = option("cpu", "Torch device, e.g. cpu or cuda.")
    model_dir: str | Path | None = option(
        None, "Model to evaluate (default: the run's --model, or the embedded default pair's)."
    )
    source_dir: str | Path | None = option(
        None, "The other model of the pair, the source of --edit patch (default: the run's, or the default pair's)."
    )
    ab_report: str | Path | None = option(
        None,
        "Output dir of `probe intervene`: use its edit (flags override) and add this table to its ab_report.md.",
    )
    out_dir: str | Path | None = option(
        None, "Output dir (default: RUN_DIR/lmeval/<time>, the --ab-report dir, or runs/lmeval/<time>).", flag="--out"
    )

    def __post_init__(self) -> None:
        choice("split", self.split, SPLITS)
        names = self.tasks.split(",") if isinstance(self.tasks, str) else list(self.tasks)
        self.tasks = [n.strip() for n in names if n.strip()] or [own_task_name(self.split)]
        own = [name for name in self.tasks if name in OWN_TASKS]
        if own and (self.apply_chat_template or self.num_fewshot):
            raise ProbeError(
                f"--tasks {own[0]}: its prompts are the rows' conversations in the model's chat template already, "
                "with no few-shot examples: leave out --chat-template and --num-fewshot (run the tasks that need "
                "them in another probe lmeval call)"
            )
        for path in self.include_path:
            if not Path(path).exists():
                raise ProbeError(
                    f"--include-path {path}: no such file or directory; give a directory (or file) "
                    "of lm-eval task YAMLs"
                )
        markdown = InterventionDir(self.ab_report).markdown if self.ab_report is not None else None
        if markdown is not None and not markdown.is_file():
            raise ProbeError(
                f"--ab-report {self.ab_report}: no {markdown.name} there; give the output directory of "
                "`probe intervene`"
            )
        self.ab_config()  # the edit options, checked as `probe intervene` checks them

    def ab_config(self) -> ABConfig:
        """The edit as ``probe intervene`` describes it (one arm per recipe; no factor-0 control)."""
        return ABConfig(
            run_dir=self.run_dir,
            capability=self.capability,
            model=self.model,
            edit=self.edit,
            source_dir=self.source_dir,
            model_dir=self.model_dir,
            positive_control=False,
            placebo=self.placebo,
            seed=self.seed,
            dtype=self.dtype,
            device=self.device,
        )


def ab_defaults(ab_dir: str | Path) -> dict[str, Any]:
    """The edit options of an A/B run (``probe intervene --out DIR``), and the split of its rows (so that the default
    task is that split's), from its JSON report."""
    path = InterventionDir(ab_dir).report
    try:
        config = json.loads(path.read_text(encoding="utf-8")).get("config", {})
    except (OSError, ValueError, AttributeError):
        raise ProbeError(
            f"--ab-report {ab_dir}: no readable {path.name} there; give the output directory of `probe intervene`"
        ) from None
    keys = (EDIT_FIELDS - {"edit"}) | {"model_dir", "dtype", "split"}
    config = {"split": "test", **config}  # a report older than the split generated the test split
    return {k: v for k, v in config.items() if k in keys and v not in (None, [])}
