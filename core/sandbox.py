"""A Jinja sandbox with a budget: a template from a model directory or a task folder is a program, bounded here.

Jinja's :class:`~jinja2.sandbox.ImmutableSandboxedEnvironment` (what transformers renders chat
templates with) keeps a template away from Python's internals, but not from the CPU or the
memory: two nested ``range(100000)`` loops run 10^10 times, and ``'a' * 10**10`` asks for 10 GB.
:class:`BudgetedSandbox` is that environment with a budget per render:

* **steps**: every loop iteration, call, attribute or item lookup, filter and intercepted operator
  is a step; a render may take :data:`MAX_STEPS`, and :data:`MAX_SECONDS` of wall time;
* **size**: a string or list that an operator, filter or method would build, and the text of a
  render, a block or a macro, may hold :data:`MAX_SIZE` characters (items); the size is checked
  *before* ``*``, ``**``, ``%``, ``replace``, ``join``, ``center`` and the like allocate;

and a template past it raises :class:`TemplateBudgetError` (a :class:`~jinja2.exceptions.SecurityError`),
which the callers turn into one line naming the template's file. A template within it renders
exactly as in the plain sandbox.

:func:`install_in_transformers` makes transformers compile chat templates with it (the class it
names, swapped in its module); :mod:`lmeval.tasks` renders lm-eval's task templates with it.

Example:
    >>> BudgetedSandbox().from_string("{{ 'ab' * 2 }}").render()
    'abab'
    >>> BudgetedSandbox().from_string("{{ 'a' * 10**10 }}").render()
    Traceback (most recent call last):
    ...
    core.sandbox.TemplateBudgetError: the template builds a value of 10000000000 characters or items, ...
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from functools import wraps
from typing import Any

from jinja2 import Template, nodes, pass_context
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_STEPS = 1_000_000
MAX_SECONDS = 2.0
MAX_SIZE = 10_000_000  # characters of a string, items of a list, characters of a render
MAX_INT_BITS = 100_000  # an integer of ~30,000 digits
_CHECK_CLOCK = 1023  # look at the clock every 1024 steps
_ITER, _SIZED = "_probe_budget_iter", "_probe_budget_size"
# a %-format or str.format field whose width or precision is 7 digits or more, or taken from the arguments
_WIDE_PERCENT = re.compile(r"%[-#0 +]*(\d{7,}|\*|\d*\.(\d{7,}|\*))")
_WIDE_FIELD = re.compile(r"\{[^{}]*:[^{}]*(\d{7,}|\{)")


class TemplateBudgetError(SecurityError):
    """A template that ran past its steps, its time, or the size of what it may build."""


class _Budget:
    """The steps and deadline of one render."""

    def __init__(self) -> None:
        self.steps = 0
        self.deadline = time.monotonic() + MAX_SECONDS

    def step(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > MAX_STEPS:
            raise TemplateBudgetError(
                f"the template ran more than {MAX_STEPS:,} steps (loop iterations, calls, lookups); "
                "a template that renders a conversation needs far fewer"
            )
        if self.steps & _CHECK_CLOCK == 0 and time.monotonic() > self.deadline:
            raise TemplateBudgetError(f"the template ran past {MAX_SECONDS:g} s")


_current: ContextVar[_Budget | None] = ContextVar("probe_template_budget", default=None)


def _step(n: int = 1) -> None:
    budget = _current.get()
    if budget is not None:
        budget.step(n)


def _fits(size: int) -> None:
    if size > MAX_SIZE:
        raise TemplateBudgetError(
            f"the template builds a value of {size} characters or items, over the limit of {MAX_SIZE}"
        )


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict)) else 0


def _sized(value: Any) -> Any:
    _fits(_size(value))
    return value


def _int_fits(bits: float) -> None:
    if bits > MAX_INT_BITS:
        raise TemplateBudgetError(f"the template builds an integer of about {int(bits)} bits, over {MAX_INT_BITS}")


# --- what an operation would build, before it builds it --------------------------------------------------------------


def _times(left: Any, right: Any) -> None:
    for seq, n in ((left, right), (right, left)):
        if isinstance(n, int) and isinstance(seq, (str, bytes, list, tuple)):
            _fits(len(seq) * max(n, 0))
    if isinstance(left, int) and isinstance(right, int):
        _int_fits(left.bit_length() + right.bit_length())


def _power(base: Any, exponent: Any) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        _int_fits(exponent * math.log2(abs(base)))


def _percent(left: Any, _right: Any) -> None:  # a binary operator's check: (left, right)
    if isinstance(left, str) and _WIDE_PERCENT.search(left):
        raise TemplateBudgetError("the template formats with a width or precision of a million or more, or `*`")


def _format_string(text: str) -> None:
    if _WIDE_FIELD.search(text):
        raise TemplateBudgetError("the template formats with a width of a million or more, or a nested width")


def _replaced(text: Any, old: Any = "", new: Any = "", count: Any = -1, *_: Any, **__: Any) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        times = len(text) + 1 if old == "" else text.count(old) if len(new) > len(old) else 0
        if isinstance(count, int) and count >= 0:
            times = min(times, count)
        _fits(len(text) + times * len(new))


def _joined(separator: Any, items: Any, *_: Any, **__: Any) -> None:
    if isinstance(separator, str) and isinstance(items, (list, tuple)):
        _fits(len(separator) * len(items) + sum(len(i) for i in items if isinstance(i, str)))


def _listed(items: Any) -> Any:
    """An iterator's items as a list, a step each, so that what joins them can be sized first."""
    if isinstance(items, (str, list, tuple, dict)) or not isinstance(items, Iterable):
        return items
    listed = []
    for item in items:
        _step()
        listed.append(item)
    return listed


def _padded(_text: Any, width: Any = 0, *_: Any, **__: Any) -> None:
    if isinstance(width, int):
        _fits(width)


def _indented(text: Any, width: Any = 4, *_: Any, **kwargs: Any) -> None:
    width = kwargs.get("width", width)
    pad = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    if isinstance(text, str):
        _fits(len(text) + pad * (text.count("\n") + 1))


def _counted(_: Any, count: Any = 0, *__: Any, **___: Any) -> None:
    if isinstance(count, int):
        _fits(count)


def _json_indent(_: Any, *__: Any, indent: Any = None, **___: Any) -> None:
    if isinstance(indent, int):
        _fits(indent * 10_000)  # an indent of 1000 spaces at most


_BINOPS: dict[str, Callable[[Any, Any], None]] = {"*": _times, "**": _power, "%": _percent}
_FILTERS: dict[str, Callable[..., None]] = {
    "center": _padded,
    "indent": _indented,
    "replace": _replaced,
    "join": lambda value, d="", *_, **__: _joined(d, value),
    "slice": _counted,
    "batch": _counted,
    "format": lambda value, *_, **__: _percent(value, None),
    "truncate": _padded,
    "wordwrap": _padded,
    "tojson": _json_indent,
}
_METHODS: dict[str, Callable[..., None]] = {
    "center": _padded,
    "ljust": _padded,
    "rjust": _padded,
    "zfill": _padded,
    "expandtabs": lambda text, size=8, *_, **__: _fits(len(text) * size if isinstance(size, int) else 0),
    "replace": _replaced,
}


def _call_check(obj: Any) -> Callable[..., None] | None:
    """What a call of ``obj`` (a string's sizing method, Jinja's ``lipsum``) would build, checked before the call."""
    owner = getattr(obj, "__self__", None)
    name = getattr(obj, "__name__", "")
    if isinstance(owner, (str, bytes)):
        check = _METHODS.get(name)
        return (lambda *args, **kwargs: check(owner, *args, **kwargs)) if check else None
    if name == "generate_lorem_ipsum":  # lipsum(n): n paragraphs of up to 100 words
        return lambda n=5, *_, **kwargs: _counted(None, 1000 * kwargs.get("n", n))
    return None


def _guarded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    check = _FILTERS.get(name)
    passes = getattr(func, "jinja_pass_arg", None) is not None  # the first argument is jinja's, not the value

    @wraps(func)  # keeps jinja's pass_context / pass_eval_context marks
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _step()
        if name == "join" and len(args) > passes:
            args = (*args[:passes], _listed(args[passes]), *args[passes + 1 :])
        if check is not None:
            check(*args[passes:], **kwargs)
        return _sized(func(*args, **kwargs))

    return guarded


class _Filters(dict[str, Any]):
    """The filters dict; each filter comes out guarded, also those added after the environment was built."""

    def __getitem__(self, name: str) -> Any:
        func = super().__getitem__(name)
        return func if name in (_ITER, _SIZED) else _guarded_filter(name, func)

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default  # noqa: SIM401 - dict.get would skip __getitem__'s guard


@pass_context
def _iterate(_: Context, iterable: Iterable[Any]) -> Iterator[Any]:
    for item in iterable:
        _step()
        yield item


@pass_context
def _checked_size(_: Context, value: Any) -> Any:
    return _sized(value)


def _wrap(node: Any, name: str) -> nodes.Filter:
    return nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)


def _with_budget(tree: nodes.Node) -> None:
    """Every ``for`` loop's iterable counts its items; every ``~`` result is size-checked."""
    for loop in tree.find_all(nodes.For):
        loop.iter = _wrap(loop.iter, _ITER)
    for parent in list(tree.find_all(nodes.Node)):
        for field in parent.fields:
            value = getattr(parent, field, None)
            if isinstance(value, nodes.Concat):
                setattr(parent, field, _wrap(value, _SIZED))
            elif isinstance(value, list):
                value[:] = [_wrap(v, _SIZED) if isinstance(v, nodes.Concat) else v for v in value]


class BudgetedTemplate(Template):
    """A template whose every render has its own budget."""

    def render(self, *args: Any, **kwargs: Any) -> str:
        token = _current.set(_Budget())
        try:
            return super().render(*args, **kwargs)
        finally:
            _current.reset(token)

    def generate(self, *args: Any, **kwargs: Any) -> Iterator[str]:
        token = _current.set(_Budget())
        try:
            total = 0
            for piece in super().generate(*args, **kwargs):
                total += len(piece)
                _fits(total)
                yield piece
        finally:
            _current.reset(token)


class BudgetedSandbox(ImmutableSandboxedEnvironment):
    """:class:`~jinja2.sandbox.ImmutableSandboxedEnvironment` with a budget per render (module docstring)."""

    template_class = BudgetedTemplate
    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.filters = _Filters(self.filters)
        self.filters[_ITER] = _iterate
        self.filters[_SIZED] = _checked_size

    def _generate(
        self, source: nodes.Template, name: str | None, filename: str | None, defer_init: bool = False
    ) -> str:
        _with_budget(source)
        return super()._generate(source, name, filename, defer_init)

    @staticmethod
    def concat(pieces: Iterable[str]) -> str:
        """The text of a render, a block or a macro, refused once it passes :data:`MAX_SIZE`."""
        kept, total = [], 0
        for piece in pieces:
            total += len(piece)
            _fits(total)
            kept.append(piece)
        return "".join(kept)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        _step()
        check = _BINOPS.get(operator)
        if check is not None:
            check(left, right)
        return _sized(super().call_binop(context, operator, left, right))

    def getattr(self, obj: Any, attribute: str) -> Any:
        _step()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _step()
        return super().getitem(obj, argument)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        owner = getattr(value, "__self__", None)
        if isinstance(owner, str) and getattr(value, "__name__", "") in ("format", "format_map"):
            _format_string(owner)
        return super().wrap_str_format(value)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _step()
        if isinstance(getattr(__obj, "__self__", None), str) and getattr(__obj, "__name__", "") == "join" and args:
            args = (_listed(args[0]), *args[1:])
            _joined(__obj.__self__, args[0])
        check = _call_check(__obj)
        if check is not None:
            check(*args, **kwargs)
        try:
            return _sized(super().call(__context, __obj, *args, **kwargs))
        except OverflowError as exc:  # Jinja's own bound: range() over MAX_RANGE items
            raise TemplateBudgetError(f"{exc}".strip() or "the template asked for a number too large") from None


def install_in_transformers() -> None:
    """Make transformers compile every chat template in this process with :class:`BudgetedSandbox`.

    transformers builds its environment from the name ``ImmutableSandboxedEnvironment`` in
    ``transformers.utils.chat_template_utils``; that name now means the budgeted subclass, and the
    templates it compiled before are forgotten.
    """
    from transformers.utils import chat_template_utils

    names = vars(chat_template_utils)  # the module's globals: it imports the name from jinja2, not re-exporting it
    if names["ImmutableSandboxedEnvironment"] is not BudgetedSandbox:
        names["ImmutableSandboxedEnvironment"] = BudgetedSandbox
        chat_template_utils._compile_jinja_template.cache_clear()
