from ttlcache import TTLCache


def test_fresh_entry():
    now = [0.0]
    c = TTLCache(10, clock=lambda: now[0])
    c.set("a", 1)
    now[0] = 5
    assert c.get("a") == 1
