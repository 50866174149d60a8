"""One ``__repr__`` shared by sluice's attrs classes, instead of one compiled per class.

attrs writes and compiles a ``__repr__`` for every class it decorates. Across the hundred-odd
classes ``import sluice`` defines, that code generation is a noticeable part of the import
(``benchmarks/import_time.py`` measures it), and a repr is only ever needed when someone
prints a value. So our classes say ``repr=False`` and inherit :class:`Record`, whose
single ``__repr__`` reads the attrs fields at call time and prints what attrs would print:
``ClassName(field=value, ...)``. It honours every field's ``repr`` setting: ``repr=False``
hides the field, a callable formats it (that is how headers with API keys are masked).
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["Record"]


class Record:
    """Base class of sluice's attrs classes (declared with ``repr=False``); adds no slots."""

    __slots__ = ()

    def __repr__(self) -> str:
        parts = []
        cls: Any = type(self)  # an attrs class: Record is only ever a base of one
        for field in attrs.fields(cls):
            shown: Any = field.repr
            if shown is False:
                continue
            value = getattr(self, field.name, attrs.NOTHING)  # NOTHING: a slot never set
            formatter = repr if shown is True else shown
            text = "NOTHING" if value is attrs.NOTHING else formatter(value)
            parts.append(f"{field.name}={text}")
        return f"{cls.__qualname__}({', '.join(parts)})"
