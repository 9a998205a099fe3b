"""A model directory's weights, read tensor by tensor, by what they are rather than by name.

Explaining a unit needs a handful of matrices of a checkpoint (one layer's MLP, the final
norm, the unembedding), and comparing two checkpoints needs the same tensor of both, one
pair at a time. Loading two full models would cost twice a model's memory for that;
:class:`Checkpoint` instead opens the directory's safetensors files with ``safe_open``
(memory-mapped, nothing read until asked) and hands out one float32 tensor per call.

Tensor names are resolved for the Llama layout that Llama, Mistral, Qwen2 and Qwen3 share:
the block list and the parts of a block come from the model family's row of
:data:`access.hook_points.ARCHITECTURES` (``model.layers``, ``self_attn``, ``mlp``,
``down_proj``), the rest from :data:`LAYOUT`. Two variations are handled:

* **tied embeddings** (SmolLM2, Qwen2-0.5B): the file has no ``lm_head.weight``; the
  unembedding is the embedding matrix. Which one applies is the config's
  ``tie_word_embeddings`` (False when absent, transformers' default for these families),
  checked against the file;
* a checkpoint saved from the bare decoder (``layers.0...`` without the ``model.`` prefix).

Families whose blocks add more than an attention and an MLP to the residual stream (Gemma 2's
post-norms, GPT-2's LayerNorm and Conv1D weights) are refused with one line.

Example:
    >>> import tempfile
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> tiny = LlamaConfig(vocab_size=64, hidden_size=8, intermediate_size=16,
    ...                    num_attention_heads=2, num_hidden_layers=2)
    >>> model_dir = Path(tempfile.mkdtemp()); LlamaForCausalLM(tiny).save_pretrained(model_dir)
    >>> _ = (model_dir / "tokenizer_config.json").write_text("{}")
    >>> with Checkpoint(model_dir, "--dpo") as dpo:
    ...     dpo.mlp_weight(1, "down").shape, dpo.unembedding_name   # column u is what unit u writes
    (torch.Size([8, 16]), 'lm_head.weight')
    >>> with Checkpoint("runs/dpo", "--dpo") as dpo:                      # doctest: +SKIP
    ...     dpo.mlp_weight(19, "down").shape, dpo.tied
    (torch.Size([576, 1536]), True)
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal

from access.hook_points import ARCHITECTURES, families
from access.pair import ModelShape, compare_configs, shape_of
from core.errors import ProbeError
from core.models import check_model_dir, weight_files

if TYPE_CHECKING:
    import torch

MlpPart = Literal["gate", "up", "down"]
SUPPORTED: tuple[str, ...] = families("checkpoint_readout")


@dataclass(frozen=True)
class Layout:
    """Tensor names outside the blocks, and the MLP and attention-output parts a hook-point row does not name."""

    embedding: str = "model.embed_tokens.weight"
    final_norm: str = "model.norm.weight"
    unembedding: str = "lm_head.weight"
    gate: str = "gate_proj"
    up: str = "up_proj"
    attention_out: str = "o_proj"


LAYOUT = Layout()


class Checkpoint:
    """Read-only, tensor-by-tensor access to one model directory's safetensors weights (see the module doc)."""

    def __init__(self, model_dir: str | Path, flag: str) -> None:
        self.dir = Path(model_dir)
        self.flag = flag
        self._stack = ExitStack()
        self.config = _config(self.dir, flag)
        self.shape: ModelShape = shape_of(self.config, self.dir)
        self.tied = bool(getattr(self.config, "tie_word_embeddings", False))
        try:
            self._files = self._open_files()
            self._check_unembedding()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stack.close()

    def _open_files(self) -> dict[str, Any]:
        from safetensors import safe_open

        files = weight_files(self.dir, self.flag)
        if any(f.suffix != ".safetensors" for f in files):
            raise ProbeError(
                f"{self.flag} {self.dir}: explain reads weights tensor by tensor from safetensors files, and this "
                "model has only .bin weights; save it again with save_pretrained() (safetensors is its default)"
            )
        by_name: dict[str, Any] = {}
        for file in files:
            try:
                handle = self._stack.enter_context(safe_open(str(file), framework="pt"))
            except Exception as exc:  # safetensors raises its own error types for a damaged file
                raise ProbeError(
                    f"{self.flag} {file}: cannot open the weights ({str(exc).splitlines()[0][:160]})"
                ) from None
            by_name.update((name, handle) for name in handle.keys())  # noqa: SIM118 - safe_open is not iterable
        return by_name

    def _check_unembedding(self) -> None:
        if not self.tied and self._find(LAYOUT.unembedding) is None:
            raise ProbeError(
                f"{self.flag} {self.dir}: the config says the embeddings are not tied, but the weights hold no "
                f"{LAYOUT.unembedding}; the directory is incomplete"
            )

    # --- names ------------------------------------------------------------------------------------------------------

    def _find(self, name: str) -> str | None:
        """``name`` as the file spells it (with or without the ``model.`` prefix), or None."""
        return next((c for c in (name, name.removeprefix("model.")) if c in self._files), None)

    def _resolve(self, name: str) -> str:
        """``name`` as the file spells it, or :class:`ProbeError`."""
        found = self._find(name)
        if found is None:
            raise ProbeError(
                f"{self.flag} {self.dir}: no tensor {name} in its weights; "
                f"is it a {'/'.join(SUPPORTED)}-style checkpoint?"
            )
        return found

    def block_name(self, layer: int, part: str) -> str:
        """The full tensor name of ``part`` (``mlp.down_proj.weight``, ...) in block ``layer``."""
        if not 0 <= layer < self.shape.n_layers:
            raise ProbeError(f"layer {layer} is outside {self.dir}, which has layers 0-{self.shape.n_layers - 1}")
        return f"{ARCHITECTURES[self.shape.model_type].layers}.{layer}.{part}"

    def mlp_name(self, layer: int, part: MlpPart, kind: str = "weight") -> str:
        arch = ARCHITECTURES[self.shape.model_type]
        module = {"gate": LAYOUT.gate, "up": LAYOUT.up, "down": arch.down_proj}[part]
        return self.block_name(layer, f"{arch.mlp}.{module}.{kind}")

    def attention_out_name(self, layer: int, kind: str = "weight") -> str:
        return self.block_name(layer, f"{ARCHITECTURES[self.shape.model_type].attention}.{LAYOUT.attention_out}.{kind}")

    @property
    def unembedding_name(self) -> str:
        """The tensor the unembedding is read from: the embedding matrix when tied."""
        return LAYOUT.embedding if self.tied else LAYOUT.unembedding

    # --- tensors ----------------------------------------------------------------------------------------------------

    def has(self, name: str) -> bool:
        return self._find(name) is not None

    def tensor(self, name: str) -> torch.Tensor:
        """One tensor as float32 (bf16/fp16 widened), read from disk now."""
        resolved = self._resolve(name)
        stored: torch.Tensor = self._files[resolved].get_tensor(resolved)
        return stored.float()

    def tensor_shape(self, name: str) -> tuple[int, ...]:
        resolved = self._resolve(name)
        return tuple(self._files[resolved].get_slice(resolved).get_shape())

    def optional(self, name: str) -> torch.Tensor | None:
        """A tensor that some checkpoints lack (a bias), or None."""
        return self.tensor(name) if self.has(name) else None

    def mlp_weight(self, layer: int, part: MlpPart) -> torch.Tensor:
        """``gate``/``up``: [d_mlp, d_model]; ``down``: [d_model, d_mlp] (column u is what neuron u writes)."""
        return self.tensor(self.mlp_name(layer, part))

    def attention_out(self, layer: int) -> torch.Tensor:
        """The attention's output projection, [d_model, n_heads × d_head] (row c writes residual coordinate c)."""
        return self.tensor(self.attention_out_name(layer))

    def unembedding(self) -> torch.Tensor:
        """[vocab, d_model]: the rows the final residual is dotted with to give the logits."""
        return self.tensor(self.unembedding_name)

    def final_norm(self) -> torch.Tensor:
        """[d_model]: the final RMSNorm's weight."""
        return self.tensor(LAYOUT.final_norm)


def _config(model_dir: Path, flag: str) -> Any:
    """The checked ``config.json`` as attributes. Read as JSON, not through transformers (whose import alone takes
    seconds): for the supported families a missing ``tie_word_embeddings`` is transformers' class default, False."""
    body = check_model_dir(model_dir, flag)
    family = body.get("model_type")
    if family not in SUPPORTED:
        raise ProbeError(
            f"{flag} {model_dir}: explain reads {', '.join(SUPPORTED)} checkpoints (an attention and a gated MLP "
            f"adding to the residual stream, RMSNorm), not {family!r}"
        )
    return SimpleNamespace(**{"tie_word_embeddings": False, **body})


def check_same_shape(a: Checkpoint, b: Checkpoint) -> None:
    """Refuse two checkpoints whose units do not correspond (a differing config size, or tied vs untied)."""
    problems = compare_configs(a.config, b.config, (a.flag, b.flag))
    if a.tied != b.tied:
        problems.append(f"tie_word_embeddings: {a.flag} {a.tied} vs {b.flag} {b.tied}")
    if problems:
        raise ProbeError(
            f"{a.dir} and {b.dir} differ in shape, so their units do not correspond: " + "; ".join(problems)
        )


def same_tensor_shape(a: Checkpoint, b: Checkpoint, name: str) -> tuple[int, ...]:
    """The shape both checkpoints give tensor ``name``; one line naming it when they differ."""
    shape_a, shape_b = a.tensor_shape(name), b.tensor_shape(name)
    if shape_a != shape_b:
        raise ProbeError(
            f"{name} has shape {list(shape_a)} in {a.dir} but {list(shape_b)} in {b.dir}; their units do not correspond"
        )
    return shape_a


def config_summary(checkpoint: Checkpoint) -> dict[str, Any]:
    """What the explain record says about a checkpoint's lens: family, depth, widths, tied or not."""
    shape = checkpoint.shape
    return {
        "model_type": shape.model_type,
        "n_layers": shape.n_layers,
        "d_model": shape.d_model,
        "d_mlp": shape.d_mlp,
        "tied_embeddings": checkpoint.tied,
        "unembedding": checkpoint.unembedding_name,
        "final_norm": LAYOUT.final_norm,
    }
