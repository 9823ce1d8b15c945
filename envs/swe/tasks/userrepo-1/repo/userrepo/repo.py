"""Users over a (slow) backing store, with a read cache."""


class UserRepo:
    def __init__(self, store):
        self.store = store  # dict id -> dict
        self._cache = {}
        self.store_reads = 0

    def get_user(self, user_id):
        if user_id not in self._cache:
            self.store_reads += 1
            self._cache[user_id] = dict(self.store[user_id])
        return self._cache[user_id]

    def update_user(self, user_id, **fields):
        self.store[user_id].update(fields)

    def delete_user(self, user_id):
        del self.store[user_id]
