"""Layered settings: defaults overridden per instance."""

DEFAULTS = {"timeout": 30, "retries": 3}


class Settings:
    def __init__(self, overrides={}):
        self.overrides = overrides

    def set(self, key, value):
        self.overrides[key] = value

    def get(self, key, default=None):
        if key in self.overrides:
            return self.overrides[key]
        return DEFAULTS.get(key, default)
