"""A golden file written as its difference from a shared one, so a change to what every case
shares rewrites one file, not every case's.

Every listener carries the whole HTTP filter chain (inert filters included: a route turns
them on with ``typed_per_filter_config``), so the cases' listeners are nearly the same
~340 lines and one filter change used to rewrite every ``<case>.listeners.yaml``. Now
``out/_shared.listeners.yaml`` holds the listener of a gateway with the default settings,
and each case's ``<case>.listeners.yaml`` holds ``delta(case, shared)``:

- a dict is an overlay on the shared dict at the same place: a key it leaves out is the
  shared one's, a key it has is changed there (or new), ``$removed: [keys]`` names the
  shared keys the case does not have;
- a list item ``{$shared: <name>, …}`` is the shared list's item of that ``name`` (filters,
  listeners, access loggers), ``{$shared: <index>, …}`` the item at that index (lists
  without names), each with the rest of the dict as an overlay on it; any other item is
  written in full (so is an item whose delta would be the larger), and the list's order is the
  case's own;
- anything else (a scalar, a list of scalars, a value the shared file does not have) is
  written in full.

So a case whose listener is the shared one reads ``- $shared: gatehouse_http``, and one
with a filter more shows the whole chain, one line per unchanged filter and the new one in
full. ``expand(delta(a, b), b) == a`` for every JSON value (a property test holds it to
that), so the two files together pin the case's whole listener.
"""

from __future__ import annotations

from typing import Any

SHARED = "$shared"
REMOVED = "$removed"


def delta(actual: Any, shared: Any) -> Any:
    """``actual`` written against ``shared`` (see the module docstring); ``actual`` must have
    no dict key starting with ``$``, which Envoy's JSON never has."""
    _check_no_markers(actual)
    return _delta(actual, shared)


def expand(written: Any, shared: Any) -> Any:
    """The value ``written`` (a ``delta`` against ``shared``) stands for."""
    if isinstance(written, dict) and isinstance(shared, dict):
        return _expand_dict(written, shared)
    if isinstance(written, list) and isinstance(shared, list):
        return [_expand_item(item, shared) for item in written]
    return written


def _delta(actual: Any, shared: Any) -> Any:
    if isinstance(actual, dict) and isinstance(shared, dict):
        return _delta_dict(actual, shared)
    if isinstance(actual, list) and isinstance(shared, list):
        return _delta_list(actual, shared)
    return actual


def _delta_dict(actual: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    out = {key: _delta(value, shared[key]) if key in shared else value
           for key, value in actual.items() if key not in shared or not _same(value, shared[key])}
    removed = [key for key in shared if key not in actual]
    if removed:
        out[REMOVED] = removed
    return out


def _named(items: list[Any]) -> dict[str, dict[str, Any]] | None:
    """The items by name if every one is a dict with a name of its own, else None."""
    if not all(isinstance(item, dict) and isinstance(item.get("name"), str) for item in items):
        return None
    by_name = {item["name"]: item for item in items}
    return by_name if len(by_name) == len(items) else None


def _delta_list(actual: list[Any], shared: list[Any]) -> list[Any]:
    by_name = _named(shared)
    return [_delta_item(item, index, shared, by_name) for index, item in enumerate(actual)]


def _delta_item(item: Any, index: int, shared: list[Any], by_name: dict[str, dict[str, Any]] | None) -> Any:
    if not isinstance(item, dict):
        return item
    ref: str | int
    if by_name is not None:
        name = item.get("name")
        if not isinstance(name, str) or name not in by_name:
            return item
        ref, base = name, by_name[name]
    elif index < len(shared) and isinstance(shared[index], dict):
        ref, base = index, shared[index]
    else:
        return item
    written = {SHARED: ref, **_delta_dict(item, base)}
    return written if _size(written) <= _size(item) else item


def _size(value: Any) -> int:
    """Nodes in a value: the smaller of an item in full and as a delta is written."""
    if isinstance(value, dict):
        return 1 + sum(1 + _size(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_size(v) for v in value)
    return 1


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (``1 == True == 1.0`` in Python, not in JSON)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(value, b[key]) for key, value in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _expand_dict(written: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    removed = set(written.get(REMOVED, ()))
    out = {key: value for key, value in shared.items() if key not in removed and key not in written}
    for key, value in written.items():
        if key not in (SHARED, REMOVED):
            out[key] = expand(value, shared[key]) if key in shared else value
    return out


def _expand_item(item: Any, shared: list[Any]) -> Any:
    if not (isinstance(item, dict) and SHARED in item):
        return item
    ref = item[SHARED]
    base = shared[ref] if isinstance(ref, int) else next(s for s in shared if isinstance(s, dict) and s.get("name") == ref)
    return _expand_dict(item, base)


def _check_no_markers(value: Any) -> None:
    if isinstance(value, dict):
        marked = [key for key in value if isinstance(key, str) and key.startswith("$")]
        if marked:
            raise ValueError(f"a key starting with '$' cannot be written as a delta: {marked}")
        for item in value.values():
            _check_no_markers(item)
    elif isinstance(value, list):
        for item in value:
            _check_no_markers(item)
