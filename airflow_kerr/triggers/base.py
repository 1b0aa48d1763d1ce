"""The one way our triggers serialize: their classpath plus the plain constructor arguments named in ``fields``."""

from __future__ import annotations

from typing import Any, ClassVar

from airflow.triggers.base import BaseTrigger


class KwargsTrigger(BaseTrigger):
    """A trigger rebuilt by the triggerer from ``serialize()``: classpath + ``{field: value}``.

    Subclasses list their constructor arguments in ``fields`` and keep each as an
    attribute of the same name, so serialization cannot drift from the constructor.
    """

    fields: ClassVar[tuple[str, ...]] = ()

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {name: getattr(self, name) for name in self.fields},
        )
