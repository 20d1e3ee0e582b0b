"""An attribute of the round coordinator that lives on one of its components.

Contract
--------
``weight_cap = Delegated("aggregation", "weight_cap")`` in a class body makes
``strategy.weight_cap`` read and write ``strategy.aggregation.weight_cap``: the settings and tables
users and subclasses reach stay attributes of the strategy while their state is owned by the
component that uses it (:mod:`flwr_adaptive.strategies.core`). ``writable=False``: read only;
``check``: a value is passed through ``check(value)`` (which raises on a bad one) before it is set.
:class:`CheckedSetting` is the same with ``check(strategy, value)``, for a setting whose check or
default depends on the strategy's other settings.

Cost
----
One extra attribute lookup per access.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["CheckedSetting", "Delegated"]


class Delegated:
    """A data descriptor forwarding one attribute to ``instance.<component>.<name>``."""

    def __init__(
        self,
        component: str,
        name: str,
        doc: str | None = None,
        *,
        writable: bool = True,
        check: Callable[[Any], Any] | None = None,
    ) -> None:
        self.component = component
        self.name = name
        self.writable = writable
        self.validate = check  # not ``self.check``: FollowedSetting's own check takes (instance, value)
        self.__doc__ = doc or f"``self.{component}.{name}``."

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return getattr(getattr(instance, self.component), self.name)

    def __set__(self, instance: Any, value: Any) -> None:
        if not self.writable:
            raise AttributeError(f"{self.name!r} is read only (it is {self.component}.{self.name})")
        if self.validate is not None:
            value = self.validate(value)
        setattr(getattr(instance, self.component), self.name, value)


class CheckedSetting(Delegated):
    """A :class:`Delegated` setting checked, when set, by ``check(instance, value)``, whose result is stored."""

    def __init__(self, component: str, name: str, doc: str, check: Callable[[Any, Any], Any]) -> None:
        super().__init__(component, name, doc)
        self.check_setting = check

    def __set__(self, instance: Any, value: Any) -> None:
        super().__set__(instance, self.check_setting(instance, value))
