"""One validated settings object for a recording, shared by the library, the CLI and notebooks.

Everything a user can get wrong without loading a model (an unknown capability, hook,
backend, position policy or dtype, a malformed layer spec, a batch size of 0, a value of
the wrong type) is rejected here, in ``__post_init__``, with a one-line :class:`ProbeError`:
the field hints say each field's type and bounds (:mod:`core.config_file`), so a config
file's values are checked by the same rules as flags. Checks that
need the model's shape (a layer outside the model) happen in :func:`access.pair.load_pair`
from ``config.json`` alone, still before any weights are loaded.

Example:
    >>> cfg = RecordConfig(capabilities="multi_turn", hooks="mlp_out,mlp_post", layers="12-31")
    >>> [c.value for c in cfg.capabilities], cfg.hooks, cfg.position
    (['multi_turn'], ('mlp_out', 'mlp_post'), 'last')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, cast

from access.directions import DEFAULT_LOCAL, LOCAL_CHOICES
from access.driver_table import DEFAULT_DRIVER, DRIVERS
from access.hook_table import DEFAULT_HOOK, HOOK_POINTS
from core.capabilities import Capability, parse_capabilities
from core.config_fields import nested, option
from core.config_file import DIRECTORY, POSITIVE, SEED, OptionError, Range, choice, typed_config
from core.config_init import flat_init
from core.errors import ProbeError
from core.pair_dirs import PairDirs
from probes.batching import CPU_MAX_BATCH_TOKENS, DEFAULT_BATCH_SIZE, MAX_USEFUL_BATCH_TOKENS
from probes.responses import RESPONSES, is_response_position

POSITIONS: tuple[str, ...] = ("last", "mean", "response_mean", "response_last")  # response_*: probes.responses
COMPUTE_DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16", "float16")
STORE_DTYPES: tuple[str, ...] = ("float16", "float32")
# A padded-token budget past which nothing changes: 128x the useful maximum (MAX_USEFUL_BATCH_TOKENS), far more than
# a GPU holds for one forward pass (about 118 KiB a token for the 8B shape in bf16), and small enough to stay an int64.
MAX_BATCH_TOKENS = 1 << 20
_LAYER = Annotated[int, Range(0)]
_LAYER_SPEC = re.compile(r"^\s*(all|\d+(\s*-\s*\d*)?(\s*,\s*\d+(\s*-\s*\d*)?)*)\s*$", re.IGNORECASE)


def _hooks(value: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    from access.hook_points import validate_hook  # torch: not for `probe --help`

    items = value.split(",") if isinstance(value, str) else [p for v in value for p in v.split(",")]
    hooks: list[str] = []
    for item in (i.strip() for i in items):
        if item and _named("hooks", validate_hook, item) not in hooks:
            hooks.append(item)
    if not hooks:
        raise OptionError("hooks", f"one or more of {', '.join(HOOK_POINTS)}", value)
    return tuple(hooks)


def _named(name: str, parse: Any, value: Any) -> Any:
    """``parse(value)``, its error said as the option ``name`` (so a config file's key is named too)."""
    try:
        return parse(value)
    except OptionError:
        raise
    except ProbeError as exc:
        raise OptionError(name, message=str(exc)) from None


def _layers(value: str | list[int] | tuple[int, ...] | None) -> str | tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        if not _LAYER_SPEC.match(value):
            raise OptionError("layers", "a range like 12-31, a list like 3,5,7, or 'all'", value)
        return value.strip()
    layers = tuple(sorted(set(value)))
    if not layers:
        raise OptionError("layers", "at least one layer index", value)
    return layers


@flat_init
@dataclass
@typed_config
class RecordConfig:
    """What to record, from which pair, and where.

    ``models`` (:class:`core.pair_dirs.PairDirs`: ``sft_dir``/``dpo_dir``, and ``base_dir``) and ``data_file`` are
    required by the recorder (the ``probe`` command fills them from ``--pair``, see :mod:`probe_cli.pairs`).
    ``layers`` is a spec string (``"12-31"``) or a list of indices, checked against the model later.
    ``device`` None picks ``cuda`` when available, else ``cpu``; ``"auto"`` spreads a large
    model over the visible GPUs (``device_map="auto"``). ``dtype="auto"`` is float32 on CPU
    and bfloat16 elsewhere. ``position`` ``response_mean``/``response_last`` teacher-force ``response`` (the test
    row's reference, or a DPO pair's chosen/rejected reply from ``responses_file`` or a DPO ``data_file``) after each
    prompt and read its tokens (:mod:`probes.responses`). ``base_dir``: the model the SFT started from, recorded too,
    on the same tokens and batches, as model ``base``. A batch holds at most ``batch_size`` prompts and, padded, at most
    ``max_batch_tokens`` tokens (None: derived from the device, see :mod:`probes.batching`). ``out_dir`` None makes a
    new ``runs/<timestamp>_<capabilities>``. Each field's help is the help of its ``probe run`` option.
    """

    models: PairDirs = nested(PairDirs)
    data_file: Path | None = option(
        None,
        "Test rows JSONL (the published RoleMRC test file works; default: the default pair's test split).",
        flag="--data",
    )
    capabilities: str | list[str] | tuple[Capability, ...] = option(
        "multi_turn",
        "multi_turn, knowledge_boundary, role_style, nested, priority, a comma list, or all.",
        flag="--capability",
        aliases=["-c"],
    )
    hooks: str | list[str] | tuple[str, ...] = option(
        (DEFAULT_HOOK,),
        "Hook point(s): mlp_out (the paper's), attn_out, resid_post, mlp_post (true MLP neurons). "
        "Repeat or comma-separate.",
        flag="--hook",
        repeat=True,
    )
    layers: str | list[_LAYER] | tuple[_LAYER, ...] | None = option(
        None, "Layers to store, e.g. 12-31 or 3,5,7 (default: all)."
    )
    position: str = option(
        "last",
        "last (the last real prompt token, as the paper), mean (over prompt tokens after BOS), or response_mean / "
        "response_last (over / at the end of a teacher-forced --response).",
    )
    response: str = option(
        "reference",
        "response_* positions: reference (the test row's reference answer), chosen or rejected (a DPO pair's reply).",
    )
    responses_file: Path | None = option(
        None,
        "DPO JSONL whose chosen/rejected replies are matched to the test rows by prompt (or give --data a DPO file).",
        flag="--responses",
    )
    local: str = option(
        DEFAULT_LOCAL,
        "Also record each layer of one model run on the other's input to that layer (the local basis, `probe "
        "analyze --basis local`): dpo_on_sft (DPO's block on SFT's input), sft_on_dpo, both, or none.",
    )
    backend: str = option(
        DEFAULT_DRIVER, "torch (plain hooks, fastest), transformer_lens (TransformerBridge) or nnsight."
    )
    batch_size: Annotated[int, POSITIVE] = option(DEFAULT_BATCH_SIZE, "At most this many prompts per forward pass.")
    max_batch_tokens: Annotated[int, Range(1, MAX_BATCH_TOKENS)] | None = option(
        None,
        "At most this many padded tokens per forward pass (prompts x longest prompt in the batch); a longer prompt "
        f"gets a batch of its own. Default: {CPU_MAX_BATCH_TOKENS} on CPU; {MAX_USEFUL_BATCH_TOKENS} on a GPU, or "
        "less where its free memory (after loading the pair) would not hold twice that batch.",
    )
    device: str | None = option(
        None,
        "cpu, cuda, cuda:N, or auto (device_map=auto for a model larger than one GPU; default: cuda if available).",
    )
    dtype: str = option("auto", "Compute dtype: auto (float32 on CPU, bfloat16 on GPU), float32, bfloat16, float16.")
    store_dtype: str = option("float16", "Stored dtype: float16 or float32.")
    add_generation_prompt: bool = option(False, "Append the assistant header before recording (the paper does not).")
    out_dir: Annotated[Path, DIRECTORY] | None = option(
        None, "Run dir; an existing one is resumed (default: a new dir under ./runs/).", flag="--out"
    )
    seed: Annotated[int, SEED] = option(0, "Seed recorded in the provenance.")
    runs_root: Annotated[Path, DIRECTORY] = option(Path("runs"), flag=None)

    def __post_init__(self) -> None:
        self.capabilities = _named("capabilities", parse_capabilities, self.capabilities)
        self.hooks = _hooks(self.hooks)
        self.layers = _layers(self.layers)

        self.position = choice("position", self.position, POSITIONS, lenient=True)
        self.response = choice("response", self.response, RESPONSES, lenient=True)
        if not is_response_position(self.position) and (
            self.response != "reference" or self.responses_file is not None
        ):
            raise OptionError(
                "response",
                message=f"--response and --responses apply to --position response_mean or response_last, "
                f"not {self.position}",
            )
        self.local = choice("local", self.local, LOCAL_CHOICES, lenient=True)
        self.backend = choice("backend", self.backend, DRIVERS, lenient=True, aliases={"tl": "transformer_lens"})
        self.dtype = choice("dtype", self.dtype, COMPUTE_DTYPES, lenient=True)
        self.store_dtype = choice("store_dtype", self.store_dtype, STORE_DTYPES, lenient=True)
        if self.device is not None:
            self.device = self.device.strip().lower()
            if not re.match(r"^(auto|cpu|cuda(:\d+)?|mps)$", self.device):
                raise OptionError("device", "cpu, cuda, cuda:N, mps or auto", self.device)
        for name in ("data_file", "out_dir", "runs_root", "responses_file"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, Path(value))
        for name in ("data_file", "responses_file"):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                raise OptionError(name, message=f"no such file: {path}")

    @property
    def parsed_capabilities(self) -> tuple[Capability, ...]:
        return cast("tuple[Capability, ...]", self.capabilities)  # parsed in __post_init__

    @property
    def capability_names(self) -> list[str]:
        return [c.value for c in self.parsed_capabilities]

    def layer_spec(self) -> str | None:
        """The layer selection as a spec string for :func:`access.hook_points.parse_layers`."""
        if self.layers is None or isinstance(self.layers, str):
            return self.layers
        return ",".join(str(i) for i in self.layers)

    def describe(self) -> dict[str, Any]:
        return {
            "capabilities": self.capability_names,
            "hooks": list(self.hooks),
            "layers": self.layer_spec() or "all",
            "position": self.position,
            **({"response": self.response} if is_response_position(self.position) else {}),
            "base": self.models.base_dir is not None,
            "local": self.local,
            "backend": self.backend,
            "batch_size": self.batch_size,
            "max_batch_tokens": self.max_batch_tokens,
            "dtype": self.dtype,
            "store_dtype": self.store_dtype,
        }
