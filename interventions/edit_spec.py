"""``EditSpec``: which edit an intervention makes, said once for ``probe intervene``, ``probe lmeval`` and
``probe replicate``.

Its fields are the edit's options: the arm kinds (``--edit``), the scale factor and dose sweep, and the units (a
neuron-set file, the top K of a ranking, or an explicit list) at a hook point. Each config that makes edits nests
it (:func:`core.config_fields.nested`), so the options read ``--edit``, ``--factor`` ... everywhere, and their
checks run here, before a model is loaded. ``--edit``'s choices and help are read from the recipes' rows
(:data:`interventions.recipes.RECIPES`).

Example:
    >>> spec = EditSpec(edits="scale,patch", units="20:7,21:3", factor=0.0)
    >>> spec.edits, spec.factor, spec.hook
    (['scale', 'patch'], 0.0, 'mlp_out')
    >>> EditSpec(units="20:7", top_k=8)
    Traceback (most recent call last):
    ...
    core.errors.ProbeError: --units cannot be combined with --neurons or --top-k; give one neuron source
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from access.factors import PAPER_FACTOR, parse_factors, validate_factor
from access.hook_table import DEFAULT_HOOK
from core.config_fields import option
from core.config_file import POSITIVE, choice, typed_config
from core.errors import ProbeError
from interventions.recipes import RECIPES

DEFAULT_EDITS: tuple[str, ...] = ("scale",)


def _parse_factors(spec: str) -> list[float]:
    """``--dose 0,0.5``: the factors of a dose sweep."""
    return parse_factors(spec)


@dataclass
@typed_config
class EditSpec:
    """The arms to run and the units they edit."""

    edits: str | list[str] = option(
        help="Arms, comma-separated or repeated: "
        + ", ".join(f"{name} ({recipe.help})" for name, recipe in RECIPES.items())
        + ".",
        default_factory=lambda: list(DEFAULT_EDITS),
        flag="--edit",
        metavar="KIND[,KIND]",
        repeat=True,
    )
    factor: float = option(PAPER_FACTOR, "Scale factor (0 ablates; the default is the paper's 1 - 1e-6).")
    neurons: str | Path | None = option(None, "Neuron-set JSON file (from `probe analyze`).")
    top_k: Annotated[int, POSITIVE] | None = option(
        None, "Top K units by |delta| of the run's ranking (or of --neurons)."
    )
    units: str | None = option(None, "Explicit units LAYER:UNIT[,...], e.g. 14:3,14:9,20:0.")
    hook: str = option(DEFAULT_HOOK, "Hook point for --top-k from a run and --units.")
    doses: list[float] = option(
        help="Dose sweep: comma-separated factors, e.g. 0,0.5,0.999999.",
        default_factory=list,
        flag="--dose",
        flag_type=str,
        from_flag=_parse_factors,
    )

    def __post_init__(self) -> None:
        from access.hook_points import validate_hook  # torch: imported here, so that `probe --help` does not

        self.factor = validate_factor(self.factor)
        self.doses = [validate_factor(f, "--dose") for f in self.doses]
        self.edits = edit_names(self.edits)
        validate_hook(self.hook)
        if self.units is not None and (self.neurons is not None or self.top_k is not None):
            raise ProbeError("--units cannot be combined with --neurons or --top-k; give one neuron source")

    @property
    def has_units(self) -> bool:
        """Whether the spec names its units itself (a file or a list), without a run's ranking."""
        return self.units is not None or self.neurons is not None


def edit_names(edits: list[str] | str) -> list[str]:
    """``["scale", "mean"]``, ``"scale,mean"`` or ``["scale,mean"]``, each a known recipe, without repeats."""
    names = [name for item in ([edits] if isinstance(edits, str) else edits) for name in str(item).split(",")]
    out: list[str] = []
    for name in (n.strip() for n in names):
        choice("edits", name, RECIPES)
        if name not in out:
            out.append(name)
    if not out:
        raise ProbeError(f"--edit: give at least one of {', '.join(RECIPES)}")
    return out
