"""A run's settings as one typed, versioned record, written to the run's settings file and HDF5 file alike.

The settings say what must be equal for two recordings to share a run directory (the
weights, tokenizer, template and data fingerprints; hooks, layers, position, backend,
dtypes) and where the inputs came from. They are written twice on purpose: the settings
file (:attr:`core.run_dir.RunDir.settings_file`) binds the directory from the moment the pair
is loaded, before anything is consolidated, and the ``settings`` attribute of the HDF5 file
keeps it self-describing when it is copied alone. Both are :func:`core.records.to_json` of the
same object, and every reader goes through :meth:`RunSettings.read`, so no reader guesses a key.

Files written before the version field (version 1) have the same keys and open unchanged; so do files
written before the response, base and local fields (they read as "no response, no base, no local basis");
a version newer than this toolkit's is refused with one line.

Example:
    >>> s = RunSettings(hooks=["mlp_out"], layers=[0, 1], data_sha256="ab")
    >>> from core.records import to_json
    >>> RunSettings.read(to_json(s)) == s
    True
    >>> s.differences(RunSettings(hooks=["mlp_out"], layers=[0, 1], data_sha256="cd"))
    ["data_sha256: run has 'ab', this call asks 'cd'"]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from access.driver_table import DEFAULT_DRIVER
from core.errors import ProbeError
from core.inputs import shown
from core.records import RecordError, from_json

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
    "local",
)


@dataclass(frozen=True)
class RunSettings:
    """What a run recorded and from what; empty strings where a writer (a synthetic run) had nothing to say."""

    VERSION: ClassVar[int] = VERSION

    hooks: list[str] = field(default_factory=list)
    layers: list[int] = field(default_factory=list)
    position: str = "last"
    backend: str = DEFAULT_DRIVER
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
    local: str = ""  # the local directions recorded (access.directions): dpo_on_sft, sft_on_dpo, both ("": none)

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

    @classmethod
    def read(cls, body: Any, where: str = "run settings") -> RunSettings:
        """``body`` as settings (no version: version 1, the same keys); what this toolkit cannot read is one line."""
        if not isinstance(body, dict):
            raise ProbeError(f"{where}: run settings must be a JSON object, got {type(body).__name__}")
        version = body.get("version", 1)
        if not isinstance(version, int) or version > VERSION:
            raise ProbeError(
                f"{where}: run settings version {version!r}, newer than this toolkit reads ({VERSION}); "
                "update the toolkit or record into a new --out"
            )
        try:
            return from_json(cls, body)
        except RecordError as exc:
            expected = _DESCRIBED.get(exc.field, exc.expected)
            raise ProbeError(
                f"{where}: malformed run settings ({exc.field} is {shown(body[exc.field])}, expected {expected}); "
                "record into a new --out"
            ) from None


_DESCRIBED = {"hooks": "a list of hook names", "layers": "a list of layer numbers"}  # beside the codec's words
