from ttlcache.cache import TTLCache
