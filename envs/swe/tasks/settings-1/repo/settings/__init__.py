from settings.store import Settings
