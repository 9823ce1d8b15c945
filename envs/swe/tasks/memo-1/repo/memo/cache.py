"""A memoizing decorator with hit statistics."""
import functools


def memoize(fn):
    cache = {}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        key = args
        if key not in cache:
            cache[key] = fn(*args, **kwargs)
        else:
            wrapper.hits += 1
        return cache[key]

    wrapper.hits = 0
    wrapper.cache = cache
    return wrapper
