"""How long ``probe lmeval``'s passes take on CPU, said when they start, from the requests they make.

lm-eval builds every task's requests before the model runs any (``lm_eval.evaluator.evaluate``), then hands the
model each kind's requests at once. :func:`requests_built` collects what the tasks build; the model's first request
call (``on_requests`` of :mod:`lmeval.model`) is the moment they are all known. Their tokens
(:func:`count_tokens`) at the measured pace (:func:`core.pace.generation_seconds`, one model):

* ``loglikelihood``: a forward over context and continuation; one-token continuations of one context count once
  (lm-eval reads them from one forward, its ``logits_cache``);
* ``loglikelihood_rolling``: a forward over the text;
* ``generate_until``: the context read, then new tokens up to the request's limit (``max_gen_toks``).

Every pass (unedited, each arm, each placebo set) runs the same requests, so the stage's estimate is the passes
times the first. Only on CPU for a model of :data:`core.pace.SMALLEST_SCALED` or more (:func:`core.pace.sized`), as
elsewhere; otherwise the stage starts at once and gives its estimate after the first pass (:func:`pass_stage`).

Example:
    >>> words = lambda texts: [t.split() for t in texts]       # a tokenizer: one token a word
    >>> limit = lambda kwargs: kwargs["max_gen_toks"]
    >>> requests = [
    ...     Request("loglikelihood", ("Q: a b c A:", " yes")),     # one-token answers of one context: one forward
    ...     Request("loglikelihood", ("Q: a b c A:", " no")),
    ...     Request("generate_until", ("Q: d e A:", {"until": ["\\n"], "max_gen_toks": 8})),
    ... ]
    >>> count_tokens(requests, words, limit)
    Tokens(prompt=10, new=8)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.pace import generation_seconds, parameter_count, sized
from core.progress import Stage, logged

Encode = Callable[[list[str]], Sequence[Sequence[int]]]


@dataclass(frozen=True)
class Request:
    """One lm-eval request: its kind (lm-eval's ``request_type``), its arguments and how many times it runs."""

    kind: str
    arguments: tuple[Any, ...]
    repeats: int = 1


@dataclass(frozen=True)
class Tokens:
    """What a pass's requests read (prompt) and may generate (new, counted at each request's limit)."""

    prompt: int
    new: int


def count_tokens(requests: Sequence[Request], encode: Encode, new_limit: Callable[[dict[str, Any]], int]) -> Tokens:
    """The tokens ``requests`` run through one model; ``encode`` tokenizes a list of texts, ``new_limit`` reads a
    generation request's token limit from its settings."""
    texts = sorted({str(text) for r in requests for text in _texts(r)})
    length = dict(zip(texts, (len(ids) for ids in encode(texts)), strict=True)) if texts else {}
    prompt = new = 0
    read: set[str] = set()
    for r in requests:
        if r.kind == "loglikelihood":
            context, continuation = str(r.arguments[0]), str(r.arguments[1])
            if length[continuation] == 1:  # lm-eval's key: the context and all but the continuation's last token
                if context in read:
                    continue
                read.add(context)
            prompt += r.repeats * (length[context] + length[continuation])
        elif r.kind == "generate_until":
            prompt += r.repeats * length[str(r.arguments[0])]
            new += r.repeats * new_limit(dict(r.arguments[1]))
        else:  # loglikelihood_rolling: the text after a start token
            prompt += r.repeats * (length[str(r.arguments[0])] + 1)
    return Tokens(prompt, new)


def _texts(request: Request) -> tuple[Any, ...]:
    return request.arguments[:2] if request.kind == "loglikelihood" else request.arguments[:1]


def pass_seconds(requests: Sequence[Any], lm: Any, parameters: float) -> float:
    """One pass's seconds on CPU: ``requests`` (lm-eval's instances) as ``lm`` (HFLM) tokenizes and limits them."""
    from lm_eval.models.utils import normalize_gen_kwargs

    def encode(texts: list[str]) -> Sequence[Sequence[int]]:
        ids: Sequence[Sequence[int]] = lm.tokenizer(texts, add_special_tokens=False)["input_ids"]
        return ids

    def new_limit(kwargs: dict[str, Any]) -> int:
        return int(normalize_gen_kwargs(kwargs, lm.max_gen_toks)["max_gen_toks"])

    counted = [Request(str(i.request_type), tuple(i.arguments), i.repeats or 1) for i in requests]
    tokens = count_tokens(counted, encode, new_limit)
    return generation_seconds(tokens.prompt, tokens.new, parameters=parameters)


@contextmanager
def requests_built() -> Iterator[list[Any]]:
    """Yields a list that collects every lm-eval task's requests as the task builds them within the block
    (``Task.build_all_requests``, which lm-eval's task classes inherit)."""
    from lm_eval.api.task import Task

    built: list[Any] = []
    original = Task.build_all_requests

    def build(self: Any, **options: Any) -> None:
        original(self, **options)
        built.extend(self.instances)

    Task.build_all_requests = build
    try:
        yield built
    finally:
        Task.build_all_requests = original


@contextmanager
def pass_stage(lm: Any, passes: int, model_dir: str | Path) -> Iterator[Callable[[], None]]:
    """The lm-eval stage in a log (:func:`core.progress.logged`), one unit a pass; yields "a pass is done".

    On CPU for a model of a scaled size it starts when the first pass's requests are known, so that its start line
    carries the estimate (the passes times the first); elsewhere it starts at once, its estimate after the first
    pass."""
    parameters = parameter_count(model_dir)
    with ExitStack() as stack:
        opened: list[Stage] = []

        def start(estimate_s: float | None) -> None:
            stage = logged("lm-eval", passes, unit="passes", step="pass", estimate_s=estimate_s)
            opened.append(stack.enter_context(stage))

        def passed() -> None:
            if not opened:  # a pass that made no request
                start(None)
            opened[0].update()

        if not sized(str(lm.device), parameters):
            start(None)
            yield passed
            return
        collecting = stack.enter_context(ExitStack())
        built = collecting.enter_context(requests_built())

        def first(requests: list[Any]) -> None:
            lm.on_requests = None
            collecting.close()
            start(passes * pass_seconds(built or requests, lm, parameters))

        lm.on_requests = first
        try:
            yield passed
        finally:
            lm.on_requests = None
