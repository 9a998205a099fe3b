"""``probe-edited``: an lm-evaluation-harness model that is lm-eval's ``hf`` model with the toolkit's edits applied.

lm-eval's own ``steered`` model can only add to a module's output, so it cannot scale, mean-ablate
or patch single MLP units. This one subclasses lm-eval's :class:`~lm_eval.models.huggingface.HFLM`
(same loading, batching, tokenization, chat templates, data parallelism under ``accelerate
launch``, here on CPU processes and across nodes too) and wraps each request method,
``loglikelihood``, ``loglikelihood_rolling`` and
``generate_until``, in :func:`access.edits.edits`: the toolkit's own torch hooks, the same
ones ``probe intervene`` generates with. With no edit, or with edits that are exact no-ops
(``Scale(units, 1.0)``), its per-item results are identical to ``hf``'s.

The edit is given the way ``probe intervene`` takes it (``lmeval.config.EDIT_FIELDS``), or
as ready :class:`~access.edits.Edit` objects. From Python::

    import lmeval.model as m; m.register()
    lm_eval.simple_evaluate(model="probe-edited", tasks=["mmlu"],
                            model_args={"pretrained": "runs/dpo", "units": "20:3,20:9", "factor": 0.0})

In an lm-eval ``model_args`` string commas separate arguments, so separate units with ``;``
(``units=20:3;20:9``). ``probe lmeval`` builds one model, then switches its edits between passes
(:meth:`use`), so the unedited and every edited pass share one loaded model.

lm-eval is an optional extra: nothing here imports it until :func:`register` (or
:func:`require_lm_eval`) is called, and without it the call is one :class:`ProbeError` saying how
to install it.

Example:
    >>> INSTALL_HINT.split(":")[0]
    'lm-evaluation-harness is not installed; it is an optional extra'
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import ProbeError
from core.progress import is_terminal
from lmeval.config import MODEL_NAME

if TYPE_CHECKING:
    from access.edits import Edit

LM_EVAL_PIN = "lm_eval[hf]==0.4.13"
INSTALL_HINT = (
    "lm-evaluation-harness is not installed; it is an optional extra: "
    f'pip install -e ".[eval]" (or pip install "{LM_EVAL_PIN}")'
)

_CLASS: type | None = None


def require_lm_eval() -> Any:
    """The ``lm_eval`` package, or one :class:`ProbeError` saying how to install the extra."""
    try:
        import lm_eval
        import lm_eval.models.huggingface  # the hf extra (torch, transformers, peft) must be there too
    except ImportError:
        raise ProbeError(INSTALL_HINT) from None
    return lm_eval


def register() -> type:
    """Define the ``probe-edited`` model class (once) and register it with lm-eval; returns the class."""
    global _CLASS
    if _CLASS is None:
        require_lm_eval()
        _CLASS = _define()
    return _CLASS


def _define() -> type:
    from lm_eval.api.registry import register_model
    from lm_eval.models.huggingface import HFLM

    from core.models import check_model_dir

    @register_model(MODEL_NAME)
    class EditedLM(_EditsInRequests, HFLM):
        """lm-eval's ``hf`` model whose three request methods run with the toolkit's edits applied."""

        def __init__(self, pretrained: str | Path, *, edits: Sequence[Edit] = (), **kwargs: Any) -> None:
            spec = {key: kwargs.pop(key) for key in list(kwargs) if key in _edit_fields()}
            if spec and edits:
                raise ProbeError(
                    f"{MODEL_NAME}: give the edit as objects (edits=) or as options ({', '.join(spec)}), not both"
                )
            check_model_dir(pretrained, "--model-dir")  # one line for a bad directory; never remote code
            kwargs.setdefault("dtype", "float32")
            kwargs.setdefault("device", "cpu")
            kwargs["trust_remote_code"] = False
            _join_cpu_processes(str(kwargs["device"]))
            super().__init__(pretrained=str(pretrained), **kwargs)
            _share_requests(self)
            self.active = ()
            self.arm_label = "unedited"
            self.on_requests = None
            self._stats = []
            if spec:
                from lmeval.arms import single_arm

                arm = single_arm(spec, self.model, pretrained)
                self.use(arm.edits, arm.label)
            elif edits:
                self.use(edits)

        def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
            with self._edited(requests):
                out: list[tuple[float, bool]] = super().loglikelihood(requests, disable_tqdm=_quiet(disable_tqdm))
                return out

        def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
            with self._edited(requests):
                out: list[float] = super().loglikelihood_rolling(requests, disable_tqdm=_quiet(disable_tqdm))
                return out

        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            with self._edited(requests):
                out: list[str] = super().generate_until(requests, disable_tqdm=_quiet(disable_tqdm))
                return out

    return EditedLM


class _EditsInRequests:
    """The edit-switching half of ``probe-edited`` (:func:`_define` joins it to lm-eval's ``HFLM``): which edits are
    active, what they changed, and the context each request method runs in."""

    model: Any
    pretrained: Any
    active: tuple[Edit, ...]
    arm_label: str
    # called with the requests as each request method starts (lmeval.estimate: the first call of a pass is when
    # lm-eval has built every task's requests)
    on_requests: Callable[[list[Any]], None] | None
    _stats: list[dict[str, int]]

    def use(self, chosen: Sequence[Edit], label: str = "") -> None:
        """Apply ``chosen`` (checked against the model now) in every later request;
        ``()`` for the unedited model."""
        for edit in chosen:
            edit.check(self.model)
        self.active = tuple(chosen)
        self.arm_label = label or (", ".join(e.label() for e in chosen) if chosen else "unedited")
        self._stats = []

    def edit_stats(self) -> dict[str, int]:
        """Hook calls and activation values seen and changed at the edited units since the last :meth:`use`."""
        keys = ("calls", "values_seen", "values_changed")
        return {key: sum(s[key] for s in self._stats) for key in keys}

    @contextmanager
    def _edited(self, requests: list[Any]) -> Iterator[None]:
        if self.on_requests is not None:
            self.on_requests(requests)
        if not self.active:
            yield
            return
        from access.edits import edits as apply_edits

        with apply_edits(self.model, *self.active) as stats:
            yield
        self._stats.append(stats.as_dict())

    def get_model_info(self) -> dict[str, Any]:
        """HFLM's, without its hub query for the model's commit (a local directory has none)."""
        return {
            "model_num_parameters": self.model.num_parameters(),
            "model_dtype": str(self.model.dtype),
            "model_dir": str(self.pretrained),
            "edits": [e.label() for e in self.active],
            "arm": self.arm_label,
        }


def _join_cpu_processes(device: str) -> None:
    """Several CPU processes (``accelerate launch`` on a machine without CUDA, or ``--device cpu``) join over gloo:
    accelerate's state is made with ``cpu=True`` before HFLM makes its Accelerator, which then shares it."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 and device.startswith("cpu"):
        from accelerate import PartialState

        PartialState(cpu=True)


def _share_requests(lm: Any) -> None:
    """Under ``accelerate launch`` every process takes its share of the requests, on CPUs too.

    HFLM joins the processes (``self.accelerator``) but deals requests only when it counts more than one GPU, and
    then by the rank within the machine; here the rank is the process's global index, so several CPU processes, and
    several nodes, each evaluate their own share and lm-eval gathers the items on rank 0."""
    accelerator = getattr(lm, "accelerator", None)
    if accelerator is not None and accelerator.num_processes > 1:
        lm._rank, lm._world_size = accelerator.process_index, accelerator.num_processes


def _edit_fields() -> frozenset[str]:
    from lmeval.config import EDIT_FIELDS

    return EDIT_FIELDS


def _quiet(disable_tqdm: bool) -> bool:
    """lm-eval's own request bar only on a terminal: in a log (a file or a pipe) its carriage returns are noise, and
    the ``lm-eval`` stage already prints a line a minute with progress and time left."""
    return disable_tqdm or not is_terminal(sys.stderr)
