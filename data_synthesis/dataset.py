"""``synthesize_dataset``: a RoleMRC-format dataset from either backend, as a :class:`SynthesizeConfig` says.

``offline`` is :func:`data_synthesis.offline.synthesize` (seeded, no network, seconds); ``llm`` is
:func:`data_synthesis.llm.synthesis.synthesize_llm` against an OpenAI-compatible endpoint, whose settings
(:class:`judging.client.config.ClientOptions`) are refused with ``offline``, where they would do nothing. The config's
fields make the options of ``probe synthesize`` (:mod:`probe_cli.options`).

Example:
    >>> config = SynthesizeConfig(roles=10)
    >>> config.backend, config.seed
    ('offline', 0)
    >>> summary = synthesize_dataset("/tmp/rolemrc-demo", config)   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from core.config_fields import flat_fields, flat_values, nested, option
from core.config_file import SEED, Range, choice, typed_config
from core.errors import ProbeError
from data_synthesis.heldout.build import MAX_PER_CAPABILITY, HeldoutConfig
from data_synthesis.offline.synthesize import MAX_ROLES, SynthesisConfig
from judging.client.config import ClientOptions

if TYPE_CHECKING:
    from data_synthesis.offline.synthesize import SynthesisSummary

BACKENDS: tuple[str, ...] = ("offline", "llm")
SPLITS: tuple[str, ...] = ("train-test", "heldout")


@dataclass(frozen=True)
@typed_config
class SynthesizeConfig:
    """How many roles, which seed, which backend, and the endpoint of the ``llm`` one."""

    roles: Annotated[int, Range(2, MAX_ROLES)] = option(
        SynthesisConfig.n_roles,
        "Roles to create; 20% are held out for the test split, which has 14*N rows (N=100: the published 1,400).",
    )
    seed: Annotated[int, SEED] = option(SynthesisConfig.seed, "Same seed, same bytes.")
    backend: str = option("offline", "offline (templated, no network) or llm (an OpenAI-compatible endpoint).")
    split: str = option(
        "train-test",
        "train-test (profiles, passages, sft, dpo, test) or heldout (heldout.jsonl only: the held-out evaluation "
        "split, offline, its 8-gram overlap with the training data checked).",
    )
    heldout_rows: Annotated[int, Range(6, MAX_PER_CAPABILITY)] = option(
        HeldoutConfig.per_capability, "With --split heldout: rows per capability (a multiple of 6)."
    )
    endpoint: ClientOptions = nested(ClientOptions, skip=["temperature"], help_prefix="LLM backend: ")

    def __post_init__(self) -> None:
        choice("backend", self.backend, BACKENDS)
        choice("split", self.split, SPLITS)


def synthesize_dataset(out_dir: str | Path, config: SynthesizeConfig) -> SynthesisSummary:
    """Write the dataset under ``out_dir`` with ``config.backend``; its summary (the ``llm`` one says more)."""
    from core.paths import check_output_dir
    from core.run_dir import Writer

    if config.split == "heldout":
        return _heldout(out_dir, config)
    if config.heldout_rows != HeldoutConfig.per_capability:
        raise ProbeError("--heldout-rows: only for --split heldout")
    if config.backend == "offline":
        from data_synthesis.offline import synthesize

        given = _endpoint_flags(config)
        if given:
            raise ProbeError(f"{', '.join(given)}: only for --backend llm (the offline backend calls no endpoint)")
        return synthesize(out_dir, n_roles=config.roles, seed=config.seed)
    from data_synthesis.llm.synthesis import synthesize_llm

    options = config.endpoint
    if options.cache_dir is not None and not options.no_cache:
        check_output_dir(options.cache_dir, "--cache-dir", writer=Writer.SYNTHESIZE)
    return synthesize_llm(out_dir, config.roles, config.seed, options.client())


def _heldout(out_dir: str | Path, config: SynthesizeConfig) -> SynthesisSummary:
    """The held-out split alone; the training-split settings and the LLM backend are refused, not ignored."""
    from data_synthesis.heldout.files import synthesize_heldout

    wrong = [
        flag
        for flag, given in (
            ("--backend llm", config.backend != "offline"),
            ("--roles", config.roles != SynthesisConfig.n_roles),
        )
        if given
    ]
    wrong += _endpoint_flags(config)
    if wrong:
        raise ProbeError(
            f"{', '.join(wrong)}: not for --split heldout (the held-out split is offline and sized by --heldout-rows)"
        )
    return synthesize_heldout(out_dir, HeldoutConfig(seed=config.seed, per_capability=config.heldout_rows))


def _endpoint_flags(config: SynthesizeConfig) -> list[str]:
    """The flags of the endpoint settings given (those not at their defaults), in option order."""
    values = flat_values(config)
    fields = flat_fields(SynthesizeConfig)
    return [str(f.flag) for name, f in fields.items() if f.path[0] == "endpoint" and values[name] != f.default]
