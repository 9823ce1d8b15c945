"""A dictionary whose entries expire. ``clock`` is injectable for tests."""
import time


class TTLCache:
    def __init__(self, ttl, clock=time.monotonic):
        self.ttl = ttl
        self.clock = clock
        self._data = {}

    def set(self, key, value):
        self._data[key] = (value, self.clock())

    def get(self, key, default=None):
        if key not in self._data:
            return default
        value, stored = self._data[key]
        return value

    def __len__(self):
        return len(self._data)
