import pytest
from pager import Paginator


def test_exact_pages():
    p = Paginator(range(6), per_page=3)
    assert p.page_count() == 2
    assert p.get_page(2) == [3, 4, 5]


def test_bad_page():
    with pytest.raises(IndexError):
        Paginator(range(6), per_page=3).get_page(0)
