"""Key layout and script assembly (no Redis needed)."""

from __future__ import annotations

import re
from pathlib import Path

from limiter import keys, scripts

from tests.unit.limiter.specs import spec

LUA = Path(scripts.__file__).parent / "lua"


def test_key_layout() -> None:
    s = spec("slidingWindow", 10, 60_000, id="shop/orders#0")
    assert keys.counter_key(s, "user-1") == "gatehouse:rl:{shop/orders#0|user-1}:sw:60000"
    assert keys.reservation_key(s, "user-1") == "gatehouse:rl:{shop/orders#0|user-1}:res:sw:60000"
    b = spec("tokenBucket", 5, 10_000, id="b")
    assert keys.counter_key(b, "1.2.3.4", prefix="p:") == "p:{b|1.2.3.4}:tb:10000"


def _tag(key: str) -> str:
    """Redis Cluster's rule: between the first '{' and the next '}'."""
    start = key.index("{")
    return key[start + 1 : key.index("}", start)]


def test_hash_tag_covers_id_and_key_even_with_braces_and_bars() -> None:
    a = spec("fixedWindow", id="we{ird}|id%")
    counter, record = keys.counter_key(a, "k}e{y|"), keys.reservation_key(a, "k}e{y|")
    assert _tag(counter) == _tag(record) == "we%7Bird%7D%7Cid%25|k%7De%7By%7C"
    x, y = spec("fixedWindow", id="a|b"), spec("fixedWindow", id="a")
    assert keys.counter_key(x, "c") != keys.counter_key(y, "b|c")


def test_scripts_are_assembled_from_common_algorithm_and_operation() -> None:
    sources = scripts.all_sources()
    assert len(sources) == 12
    for (algorithm, op), text in sources.items():
        assert "redis.call('TIME')" in text
        assert text.count("local A = {}") == 1
        assert f"-- {op}.lua" in text
    used = {"common.lua", "hit.lua", "refund.lua", "reserve.lua", "release.lua",
            "sliding_window.lua", "token_bucket.lua", "fixed_window.lua", "waiting_room.lua"}
    assert {p.name for p in LUA.glob("*.lua")} == used


def test_scripts_touch_only_declared_keys_and_no_globals() -> None:
    """Redis Cluster needs every key in KEYS; Redis refuses global variables in scripts."""
    for path in LUA.glob("*.lua"):
        text = path.read_text()
        for line in text.splitlines():
            code = line.split("--", 1)[0]
            if re.match(r"^[A-Za-z_][A-Za-z0-9_.]*\s*=", code) and not code.startswith(("A.", "v.")):
                raise AssertionError(f"{path.name}: global assignment: {line}")
        for call in re.findall(r"redis\.call\('(\w+)',\s*([^,)]+)", text):
            command, first = call
            if command in ("TIME",):
                continue
            allowed = ("key", "record", "KEYS[1]", "KEYS[2]")
            if path.name == "waiting_room.lua":  # its seven keys, named from KEYS at the top
                allowed = ("WAITING", "READY", "EXPIRY", "STATE", "SPENT", "DUE", "MISSED", "KEYS[i]")
            assert first.strip() in allowed, (path.name, call)
