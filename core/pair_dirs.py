"""``PairDirs``: where the SFT, DPO and base models of a pair are, said once for every command that loads them.

``probe run``, ``probe models eval``, ``probe explain`` and ``probe replicate`` each nest it
(:func:`core.config_fields.nested`), so their ``--sft``, ``--dpo`` and ``--base`` options, their ``--config`` keys
(``sft_dir``, ``dpo_dir``, ``base_dir``) and the check that each is a model directory are written here only. A
directory left out (None) is the command's default: the run's own models, else the embedded default pair's.

Example:
    >>> import pathlib, tempfile
    >>> model = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (model / "config.json").write_text("{}")
    >>> dirs = PairDirs(sft_dir=str(model), dpo_dir=model)
    >>> dirs.sft == model, dirs.base
    (True, None)
    >>> PairDirs(base_dir=model / "gone")
    Traceback (most recent call last):
    ...
    core.config_file.OptionError: --base: not a model directory (no .../gone/config.json)
    >>> PairDirs().dpo
    Traceback (most recent call last):
    ...
    core.errors.ProbeError: --dpo: give the DPO model directory (or --pair)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from core.config_fields import option
from core.config_file import OptionError, typed_config
from core.errors import ProbeError

_DEFAULT = "the run's, else the embedded default pair's"


@dataclass(frozen=True)
@typed_config
class PairDirs:
    """The pair's model directories (None: the command's default)."""

    sft_dir: str | Path | None = option(None, f"SFT model directory (default: {_DEFAULT}).", flag="--sft")
    dpo_dir: str | Path | None = option(None, f"DPO model directory (default: {_DEFAULT}).", flag="--dpo")
    base_dir: str | Path | None = option(
        None,
        "The untouched base the SFT started from, judged or recorded too (default with the default pair: its "
        "pretrained base; 'auto' in probe run).",
        flag="--base",
    )

    def __post_init__(self) -> None:
        for field in fields(self):
            path = getattr(self, field.name)
            if path is None:
                continue
            object.__setattr__(self, field.name, Path(path))
            if not (Path(path) / "config.json").is_file():
                raise OptionError(field.name, message=f"not a model directory (no {Path(path) / 'config.json'})")

    @property
    def sft(self) -> Path:
        return _given(self.sft_dir, "--sft", "SFT")

    @property
    def dpo(self) -> Path:
        return _given(self.dpo_dir, "--dpo", "DPO")

    @property
    def base(self) -> Path | None:
        return Path(self.base_dir) if self.base_dir is not None else None


def _given(path: str | Path | None, flag: str, name: str) -> Path:
    if path is None:
        raise ProbeError(f"{flag}: give the {name} model directory (or --pair)")
    return Path(path)
