"""``synthesize_dataset``: a RoleMRC-format dataset from either backend, as a :class:`SynthesizeConfig` says.

``offline`` is :func:`data_synthesis.offline.synthesize` (seeded, no network, seconds); ``llm`` is
:func:`data_synthesis.llm.synthesis.synthesize_llm` against an OpenAI-compatible endpoint, whose settings
(:class:`core.llm.config.ClientOptions`) are refused with ``offline``, where they would do nothing. The config's
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
from core.llm.config import ClientOptions
from data_synthesis.offline.synthesize import MAX_ROLES, SynthesisConfig

if TYPE_CHECKING:
    from data_synthesis.offline.synthesize import SynthesisSummary

BACKENDS: tuple[str, ...] = ("offline", "llm")


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
    endpoint: ClientOptions = nested(ClientOptions, skip=["temperature"], help_prefix="LLM backend: ")

    def __post_init__(self) -> None:
        choice("backend", self.backend, BACKENDS)


def synthesize_dataset(out_dir: str | Path, config: SynthesizeConfig) -> SynthesisSummary:
    """Write the dataset under ``out_dir`` with ``config.backend``; its summary (the ``llm`` one says more)."""
    from core.paths import check_output_dir

    if config.backend == "offline":
        from data_synthesis.offline import synthesize

        given = _endpoint_flags(config)
        if given:
            raise ProbeError(f"{', '.join(given)}: only for --backend llm (the offline backend calls no endpoint)")
        return synthesize(out_dir, n_roles=config.roles, seed=config.seed)
    from data_synthesis.llm.synthesis import synthesize_llm

    options = config.endpoint
    if options.cache_dir is not None and not options.no_cache:
        check_output_dir(options.cache_dir, "--cache-dir")
    return synthesize_llm(out_dir, config.roles, config.seed, options.client())


def _endpoint_flags(config: SynthesizeConfig) -> list[str]:
    """The flags of the endpoint settings given (those not at their defaults), in option order."""
    values = flat_values(config)
    fields = flat_fields(SynthesizeConfig)
    return [str(f.flag) for name, f in fields.items() if f.path[0] == "endpoint" and values[name] != f.default]
