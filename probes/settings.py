"""A run's settings as one typed, versioned record, written to ``run.json`` and the HDF5 file alike.

The settings say what must be equal for two recordings to share a run directory (the
weights, tokenizer, template and data fingerprints; hooks, layers, position, backend,
dtypes) and where the inputs came from. They are written twice on purpose: ``run.json``
binds the directory from the moment the pair is loaded, before anything is consolidated,
and the ``settings`` attribute of ``activations.h5`` keeps the file self-describing when it
is copied alone. Both are :meth:`RunSettings.to_dict` of the same object, and every reader
goes through :meth:`RunSettings.from_dict`, so no reader guesses a key.

Files written before the version field (version 1) have the same keys and open unchanged; so do files
written before the response and base fields (they read as "no response, no base");
a version newer than this toolkit's is refused with one line.

Example:
    >>> s = RunSettings(hooks=["mlp_out"], layers=[0, 1], data_sha256="ab")
    >>> RunSettings.from_dict(s.to_dict()) == s
    True
    >>> s.differences(RunSettings(hooks=["mlp_out"], layers=[0, 1], data_sha256="cd"))
    ["data_sha256: run has 'ab', this call asks 'cd'"]
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from core.errors import ProbeError
from core.inputs import shown

VERSION = 2
# Settings that must be equal for two recordings to share one run dir.
COMPAT_KEYS: tuple[str, ...] = (
    "sft_weights_sha256",
    "dpo_weights_sha256",
    "tokenizer_sha256",
    "chat_template_sha256",
    "data_sha256",
    "hooks",
    "layers",
    "position",
    "backend",
    "dtype",
    "store_dtype",
    "add_generation_prompt",
    "response",
    "responses_sha256",
    "base_weights_sha256",
)


@dataclass(frozen=True)
class RunSettings:
    """What a run recorded and from what; empty strings where a writer (a synthetic run) had nothing to say."""

    hooks: list[str] = field(default_factory=list)
    layers: list[int] = field(default_factory=list)
    position: str = "last"
    backend: str = "torch"
    dtype: str = ""
    store_dtype: str = ""
    add_generation_prompt: bool = False
    sft_dir: str = ""
    dpo_dir: str = ""
    data_file: str = ""
    sft_weights_sha256: str = ""
    dpo_weights_sha256: str = ""
    tokenizer_sha256: str = ""
    chat_template_sha256: str = ""
    data_sha256: str = ""
    seed: int = 0
    toolkit_version: str = ""
    position_policy: str = ""
    response: str = ""  # response_* positions: reference, chosen or rejected (probes.responses); "" otherwise
    responses_file: str = ""
    responses_sha256: str = ""
    base_dir: str = ""  # the third model, recorded as "base" ("": none)
    base_weights_sha256: str = ""
    version: int = VERSION

    def model_dir(self, model: str) -> str:
        """The directory the run loaded ``model`` (``sft``, ``dpo`` or ``base``) from."""
        return {"sft": self.sft_dir, "base": self.base_dir}.get(model, self.dpo_dir)

    def differences(self, asked: RunSettings) -> list[str]:
        """One line per setting that keeps ``asked`` from sharing this run's directory."""
        return [
            f"{key}: run has {getattr(self, key)!r}, this call asks {getattr(asked, key)!r}"
            for key in COMPAT_KEYS
            if getattr(self, key) != getattr(asked, key)
        ]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, body: Any, where: str = "run settings") -> RunSettings:
        if not isinstance(body, dict):
            raise ProbeError(f"{where}: run settings must be a JSON object, got {type(body).__name__}")
        version = body.get("version", 1)
        if not isinstance(version, int) or version > VERSION:
            raise ProbeError(
                f"{where}: run settings version {version!r}, newer than this toolkit reads ({VERSION}); "
                "update the toolkit or record into a new --out"
            )
        values = {key: _typed(key, value, where) for key, value in body.items() if key in _KINDS}
        values["version"] = VERSION
        return cls(**values)


_KINDS: dict[str, str] = {
    f.name: "list[str]"
    if f.name == "hooks"
    else "list[int]"
    if f.name == "layers"
    else "bool"
    if f.type == "bool"
    else "int"
    if f.type == "int"
    else "str"
    for f in fields(RunSettings)
}


def _typed(key: str, value: Any, where: str) -> Any:
    """``value`` of settings field ``key`` if it has the field's type (a list of hooks, of layers, text, a flag...)."""
    kind = _KINDS[key]
    element = {"list[str]": str, "list[int]": int}.get(kind)
    if element is not None:
        good = isinstance(value, list) and all(isinstance(v, element) and not isinstance(v, bool) for v in value)
    elif kind == "bool":
        good = isinstance(value, bool)
    elif kind == "int":
        good = isinstance(value, int) and not isinstance(value, bool)
    else:
        good = isinstance(value, str)
    if not good:
        raise ProbeError(
            f"{where}: malformed run settings ({key} is {shown(value)}, expected {_DESCRIBED[kind]}); record into a new --out"
        )
    return list(value) if element is not None else value


_DESCRIBED = {
    "list[str]": "a list of hook names",
    "list[int]": "a list of layer numbers",
    "bool": "true or false",
    "int": "an integer",
    "str": "text",
}
