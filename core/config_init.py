"""``flat_init``: a config that holds others (:func:`core.config_fields.nested`) takes their settings as keyword
arguments by their flat names too, as ``--config`` files and flags name them.

``ABConfig(units="20:7", factor=0.0)`` builds its :class:`interventions.edit_spec.EditSpec` from ``units`` and
``factor``; ``ABConfig(edit=EditSpec(units="20:7"))`` says the same. Giving a nested config and one of its flat
settings at once is a mistake, said in one line. Apply it above ``@dataclass`` (it wraps the generated
``__init__``).

Example:
    >>> import dataclasses
    >>> from core.config_fields import nested, option
    >>> @dataclasses.dataclass(frozen=True)
    ... class Decoding:
    ...     greedy: bool = option(True, "Take the likeliest token.")
    >>> @flat_init
    ... @dataclasses.dataclass
    ... class Stage:
    ...     rows: int = option(8, "Rows to read.")
    ...     decoding: object = nested(Decoding, prefix="gen_")
    >>> Stage(rows=2, gen_greedy=False)
    Stage(rows=2, decoding=Decoding(greedy=False))
    >>> Stage(decoding=Decoding(), gen_greedy=False)
    Traceback (most recent call last):
    ...
    TypeError: Stage: give decoding= or its settings (gen_greedy), not both
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

from core.config_fields import flat_fields
from core.config_file import nested_config

ConfigClass = TypeVar("ConfigClass", bound=type)


def flat_init(cls: ConfigClass) -> ConfigClass:
    """``cls`` whose ``__init__`` also takes each nested config's settings by flat name (module doc)."""
    init = vars(cls)["__init__"]  # the dataclass's own

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        holder_of = {name: f.path[0] for name, f in flat_fields(cls).items() if len(f.path) > 1}
        given: dict[str, dict[str, Any]] = {}
        for name in [k for k in kwargs if k in holder_of]:
            given.setdefault(holder_of[name], {})[name] = kwargs.pop(name)
        for holder, values in given.items():
            if holder in kwargs:
                raise TypeError(f"{cls.__name__}: give {holder}= or its settings ({', '.join(values)}), not both")
            kwargs[holder] = nested_config(cls, holder, values)
        init(self, *args, **kwargs)

    setattr(cls, "__init__", __init__)  # noqa: B010  # mypy: a class's __init__ is not assignable
    return cls
