"""Split a list into numbered pages (1-based)."""


class Paginator:
    def __init__(self, items, per_page=10):
        if per_page < 1:
            raise ValueError("per_page must be >= 1")
        self.items = list(items)
        self.per_page = per_page

    def page_count(self):
        return len(self.items) // self.per_page

    def get_page(self, number):
        if number < 1 or number > self.page_count():
            raise IndexError(f"page {number} out of range")
        start = (number - 1) * self.per_page
        return self.items[start:start + self.per_page]
