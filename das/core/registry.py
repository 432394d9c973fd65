"""das's registries (outputs, checks): items added by name, each name once."""

from __future__ import annotations


def add_named(table: dict, item, what: str):
    """Add `item` to `table` under its `name`, which must be new and not empty (a ValueError saying which); gives
    the item back, so `register` can be used as a decorator or in an assignment."""
    if not item.name or item.name in table:
        raise ValueError(f"{what} needs a new name; {item.name!r} is {'taken' if item.name else 'empty'}")
    table[item.name] = item
    return item
